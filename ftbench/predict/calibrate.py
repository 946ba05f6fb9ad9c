"""Fitting a cluster's own corrections from its runs, and applying them to a prediction (`ftbench calibrate`).

The fleet fitted ftbench's constants on A100 runs of fms-hf-tuning; a cluster's runs say how far its GPUs,
fabric and models are from that. Each correction is one number fitted robustly (a median) on the runs
that bear on it (per GPU family, then per fabric, then per model), each on what the earlier ones leave.
The allocator's reserve is not recalibrated. docs/measurements.md, "Calibrated by your own runs", has
the evidence (bench/calibration_fleet.py).

Design notes: docs/design-notes.md, "ftbench/predict/calibrate.py".
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ftbench.api.calibration import (
    Calibration,
    CalibrationRun,
    CalibrationUsed,
    FamilyCorrection,
    ModelCorrection,
    TermError,
)
from ftbench.api.prediction_report import DeviceMemory, ThroughputPrediction
from ftbench.api.profile import GpuMemory
from ftbench.api.rules.bounds import quantity_bytes
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.prediction import MemoryPrediction
from ftbench.predict.constants import (
    FITTED,
    FITTED_DEVICE,
    FLEET_GPU_FAMILIES,
    GIB,
    DeviceConstants,
    ThroughputConstants,
)
from ftbench.predict.device_memory import device_memory
from ftbench.predict.fleet_accuracy import engine_release
from ftbench.predict.throughput import StepModel, step_model
from ftbench.stats.flops import gpu_family

MIN_MODEL_RUNS: Final = 2
MIN_FAMILY_MODELS: Final = 2
DISAGREE: Final = 2.0
SATURATED_PERCENT: Final = 95.0  # above it the allocator gives its cache back: no memory figure to fit
RESERVE_MIN_BYTES: Final = 2**29  # a reserve below 0.5 GiB says too little to scale it
EXPOSED_MARGIN: Final = 1.1  # a multi-node step this much above compute + overhead shows its communication
T = TypeVar("T")


@dataclass(frozen=True)
class Observation:
    """One run as calibration reads it: its spec, what it measured, its traced memory prediction (if any)."""

    source: str
    spec: FineTuneExperimentSpec
    tokens_per_second: float | None = None
    memory_percent: float | None = None
    prediction: MemoryPrediction | None = None

    def record(self) -> CalibrationRun:
        s = self.spec
        return CalibrationRun(
            source=self.source,
            model=s.model,
            gpu_model=s.gpu_model or "",
            engine=engine_release(s),
            experiment=s.experiment.value,
            number_gpus=max(1, s.number_gpus),
            number_nodes=s.number_nodes,
            tokens_per_second=self.tokens_per_second,
            memory_percent=self.memory_percent,
        )


# -- applying ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Asked:
    """What picks a model's nearest calibration runs: the model, its experiment, GPUs and nodes (named as
    CalibrationRun names them, so TIERS reads both)."""

    model: str
    experiment: str = ""
    number_gpus: int = 1
    number_nodes: int = 1

    @classmethod
    def of(cls, spec: FineTuneExperimentSpec) -> Asked:
        return cls(spec.model, spec.experiment.value, max(1, spec.number_gpus), spec.number_nodes)


# From nearest to farthest: a model's runs in the same experiment and shape, then the same experiment on one GPU
# or several, then the same experiment, then any of its runs.
TIERS: Final[tuple[Callable[[CalibrationRun | Asked], tuple[object, ...]], ...]] = (
    lambda r: (r.experiment, r.number_gpus, r.number_nodes),
    lambda r: (r.experiment, r.number_gpus > 1),
    lambda r: (r.experiment,),
    lambda r: (),
)


def nearest(
    calibration: Calibration | None, asked: Asked, value: Callable[[CalibrationRun], float | None]
) -> tuple[float, int] | None:
    """The median of `value` over the model's runs nearest `asked` (TIERS) and how many runs it rests on; None where
    the model has fewer than MIN_MODEL_RUNS runs with a value, or where the nearest disagree by more than DISAGREE
    times (ado's table has identical runs 2-12x apart: a median of such runs is a guess, not a correction)."""
    if calibration is None:
        return None
    mine = [(r, v) for r in calibration.runs if r.model == asked.model and (v := value(r)) is not None]
    if len(mine) < MIN_MODEL_RUNS:
        return None
    for tier in TIERS:
        near = [v for r, v in mine if tier(r) == tier(asked)]
        if near:
            agree = len(near) < 2 or max(near) <= DISAGREE * max(min(near), 1e-9)
            return (statistics.median(near), len(near)) if agree else None
    return None


def throughput_constants(calibration: Calibration | None, base: ThroughputConstants = FITTED) -> ThroughputConstants:
    """The fleet's constants with the calibration's family efficiencies and fabric bandwidths."""
    if calibration is None:
        return base
    efficiency = dict(base.gpu_efficiency)
    for family, c in calibration.gpu_families.items():
        if c.compute_efficiency is not None:
            efficiency[family] = efficiency.get(family, 1.0) * c.compute_efficiency
    return dataclasses.replace(
        base,
        gpu_efficiency=efficiency,
        rdma_bytes=calibration.fabrics.get("rdma", base.rdma_bytes),
        tcp_bytes=calibration.fabrics.get("tcp", base.tcp_bytes),
    )


def step_factor(calibration: Calibration | None, asked: Asked) -> float:
    found = nearest(calibration, asked, lambda r: r.step_time_ratio)
    return found[0] if found else 1.0


def reserve_scale(calibration: Calibration | None, asked: Asked) -> float:
    found = nearest(calibration, asked, lambda r: r.reserve_scale)
    return found[0] if found else 1.0


def calibrated_throughput(
    spec: FineTuneExperimentSpec, catalog: Catalog, calibration: Calibration | None, base: ThroughputConstants = FITTED
) -> ThroughputPrediction | None:
    model = step_model(spec, catalog)
    if model is None:
        return None
    factor = step_factor(calibration, Asked.of(spec))
    return model.predict(max(1, spec.number_gpus), throughput_constants(calibration, base), factor)


def context_offset(calibration: Calibration | None, gpu_model: str | None) -> int:
    """Bytes the calibration adds to the device-level context of this GPU model's family (may be negative)."""
    family = calibration.gpu_families.get(gpu_family(gpu_model or "")) if calibration else None
    return family.context_offset_bytes or 0 if family is not None else 0


def calibrated_device(
    prediction: MemoryPrediction,
    gpu_model: str,
    gpu: GpuMemory,
    calibration: Calibration | None,
    asked: Asked | None,
    constants: DeviceConstants = FITTED_DEVICE,
) -> DeviceMemory:
    """The device-level peak with the family's context offset and the model's nearest reserve scale."""
    scale = reserve_scale(calibration, asked) if asked is not None else 1.0
    scaled = constants.with_reserve_scale(scale)
    return device_memory(prediction, gpu, scaled, context_offset=context_offset(calibration, gpu_model))


def used(calibration: Calibration | None, spec: FineTuneExperimentSpec) -> CalibrationUsed | None:
    """What of the calibration applies to this spec, one line each (status.prediction.calibration)."""
    if calibration is None:
        return None
    applied = []
    family = gpu_family(spec.gpu_model or "")
    if (f := calibration.gpu_families.get(family)) is not None:
        if f.compute_efficiency is not None:
            applied.append(f"{family}: compute efficiency x{f.compute_efficiency:.3f} ({f.runs} runs)")
        if f.context_offset_bytes is not None:
            applied.append(f"{family}: context {f.context_offset_bytes / GIB:+.2f} GiB ({f.runs} runs)")
    fabric = "rdma" if spec.enable_roce else "tcp"
    if spec.number_nodes > 1 and fabric in calibration.fabrics:
        applied.append(f"{fabric}: {calibration.fabrics[fabric] / 1e9:.1f} GB/s per GPU across nodes")
    asked = Asked.of(spec)
    if (step := nearest(calibration, asked, lambda r: r.step_time_ratio)) is not None:
        applied.append(f"{spec.model}: step time x{step[0]:.3f} (the {step[1]} nearest of its runs)")
    if (reserve := nearest(calibration, asked, lambda r: r.reserve_scale)) is not None:
        applied.append(f"{spec.model}: allocator reserve x{reserve[0]:.2f} (the {reserve[1]} nearest of its runs)")
    return CalibrationUsed(name=calibration.name, fitted_at=calibration.fitted_at, runs=len(calibration.runs),
                           applied=applied)  # fmt: skip


# -- fitting ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Rate:
    obs: Observation
    model: StepModel

    @property
    def measured_step(self) -> float:
        assert self.obs.tokens_per_second
        return self.model.step_tokens / self.obs.tokens_per_second


@dataclass(frozen=True)
class _Memory:
    obs: Observation
    prediction: MemoryPrediction
    gpu: GpuMemory
    constants: DeviceConstants = FITTED_DEVICE

    @property
    def measured_bytes(self) -> float:
        assert self.obs.memory_percent is not None
        return self.obs.memory_percent / 100 * quantity_bytes(self.gpu.capacity)

    def device(self, calibration: Calibration | None = None, asked: Asked | None = None) -> DeviceMemory:
        gpu_model = self.obs.spec.gpu_model or ""
        return calibrated_device(self.prediction, gpu_model, self.gpu, calibration, asked, self.constants)


def _family_says(family: str, members: Sequence[Observation]) -> bool:
    """A family correction needs runs of two models or more (one model's runs are its own correction), except on a
    family the fleet never ran, where any run beats the A100 stand-in."""
    return family not in FLEET_GPU_FAMILIES or len({o.spec.model for o in members}) >= MIN_FAMILY_MODELS


def _by(items: Sequence[Any], key: Callable[[Any], str]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = defaultdict(list)
    for item in items:
        out[key(item)].append(item)
    return out


def fit_calibration(
    observations: Sequence[Observation],
    catalog: Catalog,
    gpu_memory: Mapping[str, GpuMemory],
    *,
    name: str,
    fitted_at: str,
    base: ThroughputConstants = FITTED,
    device: DeviceConstants = FITTED_DEVICE,
) -> Calibration:
    """The corrections the observations support (module docstring), with their before/after errors; `base` and
    `device`: the constants they correct (the fleet's; bench/calibration_fleet.py passes a model-left-out fit)."""
    rates = [_Rate(o, sm) for o in observations if o.tokens_per_second and (sm := step_model(o.spec, catalog))]
    memories = [
        _Memory(o, o.prediction, gpu, device)
        for o in observations
        if o.prediction is not None and o.memory_percent is not None and o.memory_percent <= SATURATED_PERCENT
        and (gpu := gpu_memory.get(o.spec.gpu_model or "")) is not None
    ]  # fmt: skip
    families = _family_efficiency(rates, base)
    calibration = Calibration(name=name, fitted_at=fitted_at, gpu_families=families)
    calibration = calibration.model_copy(update={"fabrics": _fabrics(rates, throughput_constants(calibration, base))})
    constants = throughput_constants(calibration, base)
    for family, members in _by(memories, lambda m: gpu_family(m.obs.spec.gpu_model or "")).items():
        if _family_says(family, [m.obs for m in members]):
            offset = int(statistics.median(m.measured_bytes - m.device().total_bytes for m in members))
            old = families.get(family) or FamilyCorrection(runs=len(members))
            families[family] = old.model_copy(update={"context_offset_bytes": offset})
    calibration = calibration.model_copy(update={"gpu_families": dict(sorted(families.items()))})
    step_ratio = {id(r.obs): r.measured_step / r.model.seconds(constants).step for r in rates}
    reserve = {}
    for m in memories:
        d = m.device(calibration)
        if d.term("allocatorReserve") >= RESERVE_MIN_BYTES:
            reserve[id(m.obs)] = max(0.0, (m.measured_bytes - d.total_bytes + d.term("allocatorReserve")) /
                                     d.term("allocatorReserve"))  # fmt: skip
    runs = [
        o.record().model_copy(
            update={
                "step_time_ratio": round(step_ratio[id(o)], 4) if id(o) in step_ratio else None,
                "reserve_scale": round(reserve[id(o)], 3) if id(o) in reserve else None,
            }
        )
        for o in observations
    ]
    models = {}
    for model, mine in sorted(_by(runs, lambda r: r.model).items()):
        steps = [r.step_time_ratio for r in mine if r.step_time_ratio is not None]
        scales = [r.reserve_scale for r in mine if r.reserve_scale is not None]
        if max(len(steps), len(scales)) >= MIN_MODEL_RUNS:
            models[model] = ModelCorrection(
                runs=len(mine),
                step_time_factor=round(statistics.median(steps), 4) if len(steps) >= MIN_MODEL_RUNS else None,
                reserve_scale=round(statistics.median(scales), 3) if len(scales) >= MIN_MODEL_RUNS else None,
            )
    calibration = calibration.model_copy(update={"runs": runs, "models": models})
    return calibration.model_copy(update={"errors": _errors(rates, memories, calibration, base)})


def _family_efficiency(rates: Sequence[_Rate], base: ThroughputConstants) -> dict[str, FamilyCorrection]:
    """Per family, the median share of the predicted compute time its runs reached, where the runs say so."""
    out = {}
    for family, members in _by(rates, lambda r: r.model.gpu_family).items():
        if not _family_says(family, [r.obs for r in members]):
            continue
        shares = []
        for r in members:
            t = r.model.seconds(base)
            left = r.measured_step - t.overhead - t.exposed
            if left > 0.2 * r.measured_step:
                shares.append(t.compute / left)
        if shares:
            out[family] = FamilyCorrection(runs=len(members), compute_efficiency=round(statistics.median(shares), 4))
    return out


def _fabrics(rates: Sequence[_Rate], constants: ThroughputConstants) -> dict[str, float]:
    """Per fabric, the bandwidth of multi-node runs whose step shows communication the compute does not hide."""
    found: dict[str, list[float]] = defaultdict(list)
    for r in rates:
        t = r.model.seconds(constants)
        if r.model.inter_node_bytes > 0 and r.measured_step > EXPOSED_MARGIN * (t.compute + t.overhead):
            found["rdma" if r.model.rdma else "tcp"].append(r.model.inter_node_bytes / r.measured_step)
    return {k: float(f"{statistics.median(v):.3g}") for k, v in sorted(found.items())}


def _errors(
    rates: Sequence[_Rate], memories: Sequence[_Memory], calibration: Calibration, base: ThroughputConstants
) -> list[TermError]:
    """Before (the base constants) and after (the calibration, each run corrected by its nearest runs, itself
    among them: in sample)."""
    out = []
    if rates:
        constants = throughput_constants(calibration, base)

        def rate_error(r: _Rate, after: bool) -> float:
            step = r.model.seconds(constants if after else base).step
            step *= step_factor(calibration, Asked.of(r.obs.spec)) if after else 1.0
            assert r.obs.tokens_per_second
            return 100 * abs(r.model.step_tokens / step - r.obs.tokens_per_second) / r.obs.tokens_per_second

        out.append(_term("tokensPerSecond", "percent", rates, rate_error))
    if memories:

        def memory_error(m: _Memory, after: bool) -> float:
            d = m.device(calibration, Asked.of(m.obs.spec)) if after else m.device()
            assert m.obs.memory_percent is not None
            return abs(d.percent - m.obs.memory_percent)

        out.append(_term("memory", "percentagePoints", memories, memory_error))
    return out


def _term(quantity: str, unit: str, rows: Sequence[T], error: Callable[[T, bool], float]) -> TermError:
    before = [error(r, False) for r in rows]
    after = [error(r, True) for r in rows]
    return TermError.model_validate({
        "quantity": quantity, "unit": unit, "runs": len(rows),
        "medianBefore": round(statistics.median(before), 2), "p90Before": round(p90(before), 2),
        "medianAfter": round(statistics.median(after), 2), "p90After": round(p90(after), 2),
    })  # fmt: skip


def p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
