"""Does a memory prediction fit the GPU it will run on? The verdict the CLI, validation and sweeps share.

Pure: a `MemoryPrediction` (tensor memory, traced) plus the profile's `gpuMemory` for the spec's
GPU model gives the device-level peak as NVML counts it (`ftbench.api.device_memory`: tensors, CUDA
context, the allocator's reserve, FSDP1's unsharded gradients under accumulation, communication buffers) and the verdict, `MemoryFit`. The
prediction is an estimate and says so: `fleetAccuracy` is how far it was from real GPUs on ado's fleet rows
like the run, and `borderline` marks a requirement within that 90th-percentile error of the capacity either
way (`BORDERLINE_FRACTION` where the fleet has no such rows), where the verdict could go either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any, Final

from pydantic import Field

from ftbench.api.api_model import ApiModel
from ftbench.api.calibrate import Asked, calibrated_device, calibrated_throughput, used
from ftbench.api.calibration import CalibrationUsed
from ftbench.api.device_memory import DeviceMemory
from ftbench.api.fleet_accuracy import FleetAccuracy, Question, fleet_accuracy, question, scope, throughput_accuracy
from ftbench.api.profile import ClusterProfile
from ftbench.api.rules_data import RowsThatTrain, rows_that_train
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.throughput import RunTimeEstimate, ThroughputPrediction, run_time
from ftbench.catalog import Catalog
from ftbench.contracts.conditions import ConditionType
from ftbench.contracts.network import Collective, NetworkInEffect
from ftbench.contracts.prediction import MemoryPrediction

BORDERLINE_FRACTION: Final = 0.10
# The reason of a run refused for a predicted OOM (spec.run.oomPrecheck refuse): the operator writes it,
# sweeps read it (the point is skipped, not launched).
PREDICTED_OOM_REASON: Final = "PredictedOOM"


# Why the verdict leaves a device-level term out (ftbench.api.device_memory): shown beside it when it matters.
LEFT_OUT_OF_VERDICT: Final = {
    "allocatorReserve": "the caching allocator frees its cached blocks and retries before it reports an OOM",
    "unshardedGradients": "FSDP's no_sync (FSDP1 and FSDP2 alike) holds them between accumulated micro-steps on "
    "CPU ranks and in ado's dense runs up to 8B, but ado's mixtral-8x7b and llama3.1-70b full runs ran without room "
    "for them (docs/measurements.md, limits)",
}


class RiskTerm(ApiModel):
    """A device-level term the verdict leaves out, where it would take the total past the card."""

    name: str = Field(description="The term (allocatorReserve, unshardedGradients).")
    bytes: Annotated[int, Field(ge=0)] = Field(description="What it adds to the device-level total.")
    why: str = Field(description="Why the verdict leaves it out.")

    def sentence(self) -> str:
        return f"{self.name} {self.bytes / 2**30:.1f} GiB, left out because {self.why}"


class MemoryFit(ApiModel):
    """A prediction against one GPU model's memory."""

    gpu_model: str = Field(description="spec.gpuModel, as the profile's gpuMemory lists it.")
    capacity_bytes: Annotated[int, Field(ge=0)] = Field(description="The GPU model's memory (profile gpuMemory).")
    runtime_overhead_bytes: Annotated[int, Field(ge=0)] = Field(
        description="The CUDA context and libraries' workspaces a process holds (profile gpuMemory runtimeOverhead)."
    )
    predicted_total_bytes: Annotated[int, Field(ge=0)] = Field(
        description="Estimate: the device-level peak as NVML counts it (every term of `device`)."
    )
    predicted_percent: Annotated[float, Field(ge=0)] = Field(
        description="Estimate: the device-level peak as a percentage of the capacity, at most 100 (kubectl's PredMem%, "
        "beside the measured PeakMem%)."
    )
    required_bytes: Annotated[int, Field(ge=0)] = Field(
        0, description="What must fit for the run not to fail: every term of `device` but those in atRisk."
    )
    fits: bool = Field(description="requiredBytes is at most the capacity: the verdict.")
    at_risk: list[RiskTerm] = Field(
        default_factory=list,
        description="Terms the verdict leaves out that would take the device-level total past the capacity, each "
        "with why it is left out (empty where the total fits).",
    )
    borderline: bool = Field(
        description="What must fit is within the fleet's 90th-percentile error (fleetAccuracy; 10 % without one) of "
        "the capacity either way: the verdict could go either way."
    )
    headroom_bytes: int = Field(description="Capacity minus what must fit (negative: predicted OOM).")
    device: DeviceMemory | None = Field(None, description="The device-level peak term by term.")
    fleet_accuracy: FleetAccuracy | None = Field(
        None,
        description="How sure predictedPercent is: how far it was from the NVML peak real A100-80GB runs measured on "
        "ado's fleet rows like this run (its scope and model kind; docs/benchmarks.md).",
    )

    def sentence(self) -> str:
        """The verdict beside the total it judged: where terms are left out, the total that must fit, and the terms
        at risk after it, so no total above the card stands beside "fits"."""
        gib = 2**30
        verdict = "fits" if self.fits else "does not fit (predicted OOM)"
        edge = ", borderline" if self.borderline else ""
        left_out = {r.name for r in self.at_risk}
        terms = " + ".join(
            f"{t.name} {t.bytes / gib:.1f}" for t in (self.device.terms if self.device else []) if t.bytes and
            t.name not in left_out
        )  # fmt: skip
        shown = self.required_bytes if self.at_risk else self.predicted_total_bytes
        what = "must fit" if self.at_risk else "as NVML counts it"
        risk = (
            "; at risk (left out of the verdict; with them NVML's count would pass the card): "
            + "; ".join(r.sentence() for r in self.at_risk)
            if self.at_risk
            else ""
        )
        return (
            f"predicted {shown / gib:.1f} GiB per GPU {what} ({terms} GiB) of {self.capacity_bytes / gib:.1f} GiB "
            f"on {self.gpu_model}: {verdict}{edge}{risk}"
        )


def memory_fit(
    prediction: MemoryPrediction, gpu_model: str | None, profile: ClusterProfile, asked: Question | None = None
) -> MemoryFit | None:
    """The verdict, or None where there is nothing to compare with (CPU ranks, a GPU model the profile lacks);
    `asked` (`fleet_accuracy.question` of the spec: model, kind, what lies outside the calibration) picks the
    fleet's out-of-sample band; without it, the band of a model the fleet has not seen."""
    if prediction.device != "cuda" or not gpu_model or gpu_model not in profile.gpu_memory:
        return None
    near = (
        Asked(asked.model, asked.experiment, prediction.world_size, prediction.nodes) if asked and asked.model else None
    )
    device = calibrated_device(prediction, gpu_model, profile.gpu_memory[gpu_model], profile.calibration, near)
    capacity = device.capacity_bytes
    where = scope(prediction.world_size, prediction.nodes)
    asked = dataclasses.replace(asked, scope=where) if asked is not None else Question(scope=where)
    accuracy = fleet_accuracy(asked)
    margin = accuracy.p90_percent_points / 100 if accuracy else BORDERLINE_FRACTION
    over = device.total_bytes > capacity
    return MemoryFit(
        gpu_model=gpu_model,
        capacity_bytes=capacity,
        runtime_overhead_bytes=device.term("context"),
        predicted_total_bytes=device.total_bytes,
        predicted_percent=device.percent,
        required_bytes=device.required_bytes,
        fits=device.fits,
        at_risk=[
            RiskTerm(name=name, bytes=device.term(name), why=why)
            for name, why in LEFT_OUT_OF_VERDICT.items()
            if over and device.term(name)
        ],
        borderline=abs(capacity - device.required_bytes) <= margin * capacity,
        headroom_bytes=capacity - device.required_bytes,
        device=device,
        fleet_accuracy=accuracy,
    )


class PredictionReport(ApiModel):
    """`ftbench predict -o json`: the prediction and its verdict against the GPU model's memory."""

    prediction: MemoryPrediction = Field(description="Predicted peak tensor memory per device and its split.")
    fit: MemoryFit | None = Field(None, description="Unset on CPU ranks or for a GPU model the profile lacks.")
    measured_peak_bytes: Annotated[int, Field(ge=0)] | None = Field(
        None,
        description="What the run measured for the same quantity: the largest rank's torch.cuda.max_memory_allocated "
        "(status.results.gpuMaxMemoryAllocatedBytes), on CPU ranks the tracker's steady-state tensor peak "
        "(status.results.cpuTensorPeakBytes); unset until the run succeeds.",
    )
    error_percent: float | None = Field(
        None, description="(predicted peak - measured peak) / measured peak x 100: positive over-predicts."
    )
    measured_oom: bool | None = Field(
        None, description="The run ran out of GPU memory (true) or finished without (false); unset while it runs."
    )
    rows_offered: Annotated[int, Field(ge=0)] | None = Field(
        None, description="Entries of the run's dataset (unset where the prompt lengths are not known before the run)."
    )
    rows_trained: Annotated[int, Field(ge=0)] | None = Field(
        None,
        description="Entries that keep a trained token at modelMaxLength, counted before the run with the model's "
        "own tokenizer (the predictor's) or the catalog's table: exact, as status.results.rowsTrained counts them.",
    )
    throughput: ThroughputPrediction | None = Field(
        None,
        description="Predicted steady throughput (an estimate, ftbench.api.throughput); unset on CPU ranks, for a "
        "GPU model without a known peak or a model without a catalog architecture.",
    )
    run_time: RunTimeEstimate | None = Field(
        None, description="Training time and GPU-hours the stop settings imply at the predicted step time (estimate)."
    )
    throughput_with_preflight: ThroughputPrediction | None = Field(
        None,
        description="The throughput prediction again with the inter-node bus bandwidth the run's network preflight "
        "measured (multi-node runs with run.networkPreflight); throughputErrorPercent is against it when set.",
    )
    calibration: CalibrationUsed | None = Field(
        None,
        description="The cluster profile's calibration this prediction used (ftbench calibrate) and what of it applied; "
        "unset without one: the fleet's constants as they are.",
    )
    measured_tokens_per_second: Annotated[float, Field(ge=0)] | None = Field(
        None, description="The run's steady tokens/s (status.results.steadyStateTokensPerSecond), once it succeeded."
    )
    throughput_error_percent: float | None = Field(
        None,
        description="(predicted - measured steady tokens/s) / measured x 100: positive over-predicts (every run "
        "checks the throughput model, as it checks the memory prediction).",
    )

    def measured(
        self,
        peak_bytes: int | None,
        *,
        oom: bool,
        tokens_per_second: float | None = None,
        network: NetworkInEffect | None = None,
    ) -> PredictionReport:
        """This prediction beside what the run measured (accuracy is tracked on every run); `network`: the run's
        preflight, whose allGather busbw replaces the fitted inter-node bandwidth."""
        update: dict[str, object] = {"measured_oom": oom}
        throughput = self.throughput
        bus = all_gather_bus_bytes(network)
        if throughput is not None and bus and throughput.inter_node_bytes_per_gpu > 0:
            throughput = throughput.with_bus_bandwidth(bus)
            update["throughput_with_preflight"] = throughput
        if tokens_per_second and throughput is not None:
            predicted = throughput.tokens_per_second_estimate
            update |= {
                "measured_tokens_per_second": tokens_per_second,
                "throughput_error_percent": round(100.0 * (predicted - tokens_per_second) / tokens_per_second, 1),
            }
        if peak_bytes:
            update |= {
                "measured_peak_bytes": peak_bytes,
                "error_percent": round(100.0 * (self.prediction.peak_bytes - peak_bytes) / peak_bytes, 1),
            }
        return self.model_copy(update=update)


def prediction_report(
    prediction: MemoryPrediction, spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile
) -> PredictionReport:
    """The memory prediction with its verdict, the predicted throughput and the run time it implies: what
    `ftbench predict` prints and the operator writes to status.prediction (one composition for both)."""
    asked = question(spec, catalog, profile.calibration)
    throughput = calibrated_throughput(spec, catalog, profile.calibration)
    if throughput is not None:
        throughput = throughput.model_copy(update={"accuracy": throughput_accuracy(asked)})
    rows = rows_of(prediction, spec, catalog)
    return PredictionReport(
        prediction=prediction.model_copy(update={"prompt_tokens": None}),  # the counts below say what status needs
        fit=memory_fit(prediction, spec.gpu_model, profile, asked),
        rows_offered=rows.offered if rows is not None else None,
        rows_trained=rows.trained if rows is not None else None,
        throughput=throughput,
        run_time=run_time(spec, catalog, throughput) if throughput is not None else None,
        calibration=used(profile.calibration, spec),
    )


def rows_of(prediction: MemoryPrediction, spec: FineTuneExperimentSpec, catalog: Catalog) -> RowsThatTrain | None:
    """The rows that train at the spec's modelMaxLength: from the predictor's count under the model's tokenizer,
    else the catalog's table (the generated tiny model), else None (the run counts them when it starts)."""
    return rows_that_train(spec, catalog, prediction.prompt_lengths())


def all_gather_bus_bytes(network: NetworkInEffect | None) -> float | None:
    """The preflight's largest allGather busbw in bytes/s (FSDP's collective), None without a preflight. A result
    trimmed to fit the termination message keeps only the peak over collectives, which stands in."""
    if network is None:
        return None
    samples = [b.bus_bandwidth_gbps for b in network.bandwidth if b.collective == Collective.ALL_GATHER]
    peak = max(samples) if samples else network.peak_bus_bandwidth_gbps
    return peak * 1e9 if peak > 0 else None


def status_predicted_percent(status: Mapping[str, Any]) -> float | None:
    """An experiment's `status.prediction.fit.predictedPercent` (None without a verdict)."""
    value = ((status.get("prediction") or {}).get("fit") or {}).get("predictedPercent")
    return float(value) if value is not None else None


def status_predicted_fits(status: Mapping[str, Any]) -> bool | None:
    """An experiment's `status.prediction.fit.fits` (None without a verdict)."""
    value = ((status.get("prediction") or {}).get("fit") or {}).get("fits")
    return bool(value) if value is not None else None


def status_refused_for_predicted_oom(status: Mapping[str, Any]) -> bool:
    """The experiment ended Invalid because its prediction did not fit (oomPrecheck refuse)."""
    return status.get("phase") == "Invalid" and any(
        c.get("type") == ConditionType.VALID and c.get("reason") == PREDICTED_OOM_REASON
        for c in status.get("conditions") or []
    )
