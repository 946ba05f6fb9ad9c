"""`predict(plan)`: the plan's model traced for its step, rescaled for its sharding."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import ROWS_NOTE_PREFIX, MemoryPrediction, MemorySplit, PromptLength
from ftbench_trainer.measure.split import Split
from ftbench_trainer.predict import trace_store
from ftbench_trainer.predict.depth import ScaledFamily, scaled_family, trace_scaled
from ftbench_trainer.predict.plan_step import FLASH, sharding, step_shape
from ftbench_trainer.predict.shard import Sharding, Sizes, shard, unsharded_gradients
from ftbench_trainer.predict.stack import stack
from ftbench_trainer.predict.step import FsdpShape, StepShape, Trace
from ftbench_trainer.predict.step_family import FEWEST_ROWS

# FSDP strategies traced with FSDP2 on a fake process group, and those that reshard after forward.
FSDP_TRACED = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
RESHARD_AFTER_FORWARD = ("FULL_SHARD", "HYBRID_SHARD")
# GPTQ 4-bit weights: half a byte per weight, plus per group of 128 a float16 scale and a 4-bit zero.
GPTQ_BYTES_PER_WEIGHT = 0.5 + (2 + 0.5) / 128
CATALOG_ORIGIN = "the catalog's (no config.json here)"
log = logging.getLogger(__name__)


class PredictionError(RuntimeError):
    """The prediction cannot be made (no config to read, an architecture transformers cannot build)."""


def architecture_config(architecture: dict[str, Any]) -> Any:
    """The transformers config of a catalog entry's `architecture` (model_type plus the config's fields)."""
    import transformers
    from transformers import AutoConfig

    fields = dict(architecture)
    kind = fields.pop("model_type")
    try:
        return AutoConfig.for_model(kind, **fields)
    except (ValueError, KeyError) as exc:
        raise PredictionError(
            f"transformers {transformers.__version__} (this engine's stack) has no {kind} architecture, so the "
            f"engine cannot load this model either: {str(exc).splitlines()[0]}"
        ) from exc


def read_config(plan: LaunchPlan) -> tuple[Any, str]:
    """The model's config (no weights) and where it came from: the config.json beside the weights
    when that folder is here (the tiny model is built first when the plan says so), else the
    catalog's `architecture` (a hub id is never fetched for it), else the hub or its cache."""
    from transformers import AutoConfig

    from ftbench_trainer.inputs import resolve_model

    model = plan.model
    origin, _ = config_source(plan)
    if origin == CATALOG_ORIGIN and model.architecture:
        return architecture_config(model.architecture), origin
    try:
        return AutoConfig.from_pretrained(resolve_model(plan)), f"{model.ref}/config.json"
    except (OSError, ValueError) as exc:
        raise PredictionError(
            f"cannot read the config of model {model.name} at {model.ref}: {exc}. The prediction needs the "
            "model's config.json only (no weights): point the model at a folder that has it, or give the catalog "
            "entry an architecture"
        ) from exc


@dataclass(frozen=True)
class StepPeak:
    """One rank's predicted peak for a traced step shape and a sharding."""

    phase: str
    split: Split
    trace: Trace
    activations: int = 0  # the most forward or backward hold beyond state: what the allocator's cache grows by
    unsharded_gradients: int = 0  # no_sync's unsharded gradients between micro-steps (FSDP1: shard.unsharded_gradients)
    unsharded_in_peak: bool = False  # FSDP2: they are part of the traced peak

    @classmethod
    def of(cls, phases: dict[str, Split], trace: Trace) -> StepPeak:
        phase = max(phases, key=lambda p: phases[p].total)
        activations = max((phases[p].other for p in ("forward", "backward") if p in phases), default=0)
        return cls(phase, phases[phase], trace, activations)

    @property
    def bytes(self) -> int:
        return self.split.total


def traced_fsdp(s: Sharding, *, gptq: bool = False) -> FsdpShape | None:
    """The FSDP2 run to trace for `s`, or None where the arithmetic of `shard` applies instead: one
    rank, no FSDP, FSDP1 (fms-hf-tuning's: flat parameters, the root kept gathered, its own master
    weights), offload (the fake device cannot tell host from device memory), GPTQ's 4-bit weights."""
    if s.ranks < 2 or s.kind not in FSDP_TRACED or s.fsdp1 or s.offload_parameters or gptq:
        return None
    return FsdpShape(ranks=s.ranks, reshard_after_forward=s.kind in RESHARD_AFTER_FORWARD)


def config_source(plan: LaunchPlan) -> tuple[str, str | None]:
    """Where `read_config` will find the plan's config (the prediction's note), and that config's source text
    where it names it for good (the catalog's fields, a config.json here): what the trace store keys on."""
    model = plan.model
    path = Path(model.ref) / "config.json"
    if not model.generated and path.is_file():
        return f"{model.ref}/config.json", path.read_text()
    if not model.generated and model.architecture:
        return CATALOG_ORIGIN, json.dumps(model.architecture, sort_keys=True)
    return f"{model.ref}/config.json", None  # a model built on demand, or the hub's cache: traced every time


# New steps' families waiting to be recorded (`families_after`), by their store names, oldest first.
_pending: OrderedDict[str, Callable[[], None]] = OrderedDict()
_deferring = False


@contextlib.contextmanager
def families_after() -> Iterator[None]:
    """Within it, a new step's family (two to six more traces, predict.step_family) is not recorded before the
    answer but left waiting (`record_waiting`): the resident predictor answers a single plan so, and records the
    families while no question waits. A question whose step's family waits records it first (`step_trace`); a
    batch records each at once, as its later plans may ask it."""
    global _deferring
    _deferring = True
    try:
        yield
    finally:
        _deferring = False


def waiting() -> bool:
    return bool(_pending)


def record_waiting() -> bool:
    """Record and keep the oldest waiting family; False where none waits."""
    if not _pending:
        return False
    _pending.popitem(last=False)[1]()
    return True


def step_trace(config: Callable[[], Any], shape: StepShape, fsdp: FsdpShape | None, source: str | None) -> Trace:
    """The step's trace at reduced depth, scaled (predict.depth): from the trace store where `source` names the
    architecture and it holds this trace or its step family (predict.step_family), else traced from `config()`
    (and kept, with its family: now, or later within `families_after`)."""
    if source is None:
        return _traced(config(), shape, fsdp)[0]
    name, family_name = trace_store.key(source, shape, fsdp), trace_store.family_key(source, shape, fsdp)
    if (kept := trace_store.load(name)) is not None:
        return kept
    if (waiting := _pending.pop(family_name, None)) is not None:
        waiting()  # this step's family, left waiting by an earlier answer: this question needs it now
    known = trace_store.load_family(family_name)
    if known is not None and known.answers(shape.batch, fsdp.ranks if fsdp else None):
        trace = known.at(shape.batch, fsdp.ranks if fsdp else None)
    else:
        architecture, wanted = config(), known is None and trace_store.folder() is not None
        # One row's family (rank counts only) is recorded where the resident has time for it, not on a batch's
        # clock: a sweep seldom asks one row at two rank counts.
        now = wanted and not _deferring and shape.batch >= FEWEST_ROWS
        trace, found = _traced(architecture, shape, fsdp, family=now)
        if found is not None:
            trace_store.save_family(family_name, found)
        if wanted and _deferring:
            _pending[family_name] = functools.partial(_keep_family, architecture, shape, fsdp, family_name)
            _one_row_after(architecture, shape, fsdp, source)
    trace_store.save(name, trace)
    return trace


def _one_row_after(architecture: Any, shape: StepShape, fsdp: FsdpShape | None, source: str) -> None:
    """Under FSDP2 at two rows per device, the one-row step's family of rank counts too, left waiting after the
    step's own: where the spec's GPUs double, two rows per device become one, a step of its own
    (step_family.FEWEST_ROWS) that the two-row family does not answer."""
    if fsdp is None or shape.batch != FEWEST_ROWS:
        return
    one_row = dataclasses.replace(shape, batch=1)
    name = trace_store.family_key(source, one_row, fsdp)
    if name not in _pending and trace_store.load_family(name) is None:
        _pending[name] = functools.partial(_keep_family, architecture, one_row, fsdp, name)


def _keep_family(architecture: Any, shape: StepShape, fsdp: FsdpShape | None, name: str) -> None:
    """A step's family recorded and kept after its answer (its traces are depth's cached recordings: none twice).
    One the stack cannot record is a step traced again next time; a defect of ftbench's own raises (`_traced`)."""
    try:
        _, found = _traced(architecture, shape, fsdp, family=True)
    except PredictionError as exc:
        log.warning("no step family for %s: %s", getattr(architecture, "model_type", "?"), exc)
        return
    if found is not None:
        trace_store.save_family(name, found)


def _traced(
    architecture: Any, shape: StepShape, fsdp: FsdpShape | None, *, family: bool = False
) -> tuple[Trace, ScaledFamily | None]:
    """The scaled trace and, with `family`, its step family (None where its recordings disagree)."""
    try:
        return trace_scaled(architecture, shape, fsdp), scaled_family(architecture, shape, fsdp) if family else None
    except Exception as exc:  # whose failure it is decides the answer: a defect of ours, or the stack refusing
        if raised_by_ftbench(exc):  # a defect of ftbench's own: its traceback, not "cannot predict"
            raise
        raise PredictionError(untraceable(architecture, exc)) from exc  # the stack cannot run it: one line


def predict_step(
    config: Any, shape: StepShape, s: Sharding, *, gptq: bool = False, trace: Trace | None = None
) -> StepPeak:
    """Trace `shape` (as one rank of its FSDP2 run, where `traced_fsdp` says so), else rescale the
    single-rank trace for `s`; take the highest phase (GPTQ: quantize the whole model's weights
    first, then shard what is left). `trace`: that trace, already made (`step_trace`)."""
    fsdp = traced_fsdp(s, gptq=gptq)
    if trace is None:
        trace = step_trace(lambda: config, shape, fsdp, None)
    if fsdp is not None:
        return _with_fsdp2_unsharded(StepPeak.of(trace.phases, trace), shape, s)
    traced, sizes = trace.phases, sizes_of(trace)
    if gptq:
        traced = {k: _gptq(v, trace) for k, v in traced.items()}
        quantized = int(trace.quantizable_weights * GPTQ_BYTES_PER_WEIGHT)
        sizes = dataclasses.replace(
            sizes,
            parameters=sizes.parameters - trace.quantizable_weights * 2 + quantized,
            layer=int(sizes.layer * GPTQ_BYTES_PER_WEIGHT / 2),
        )
    return dataclasses.replace(
        StepPeak.of(shard(traced, s, sizes), trace), unsharded_gradients=unsharded_gradients(s, sizes)
    )


def _with_fsdp2_unsharded(peak: StepPeak, shape: StepShape, s: Sharding) -> StepPeak:
    """FSDP2 under accelerate's no_sync: the traced peak holds every trained parameter's unsharded gradient from
    the first micro-step's backward to the last one's reduce-scatter. State how much of the peak that is (the
    most any forward or backward phase holds, up to the gradients it held), so the device-level peak can show
    it as FSDP1's, outside the verdict (docs/measurements.md, "Device memory")."""
    if not shape.no_sync:
        return peak
    whole = peak.trace.trainable_bytes - (peak.trace.expert_trainable_bytes if s.expert_parallel else 0)
    phases = peak.trace.phases
    without = max(
        sp.total - (min(whole, sp.gradients) if name in ("forward", "backward") else 0) for name, sp in phases.items()
    )
    return dataclasses.replace(peak, unsharded_gradients=max(0, peak.bytes - without), unsharded_in_peak=True)


def sizes_of(trace: Trace) -> Sizes:
    return Sizes(
        parameters=trace.parameter_bytes,
        trainable=trace.trainable_bytes,
        layer=trace.largest_layer_bytes,
        root=trace.root_bytes,
        root_trainable=trace.root_trainable_bytes,
        experts=trace.expert_bytes,
        experts_trainable=trace.expert_trainable_bytes,
        layer_experts=trace.layer_expert_bytes,
    )


def raised_by_ftbench(exc: BaseException) -> bool:
    """Whether `exc` was raised in ftbench's own code (its innermost frame is in ftbench_trainer or ftbench),
    rather than by torch, transformers or peft refusing the architecture: the one is a bug to report, the
    other a model this environment cannot trace."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = str(tb.tb_frame.f_globals.get("__name__", ""))
    return module.split(".")[0] in ("ftbench_trainer", "ftbench")


def untraceable(config: Any, exc: Exception) -> str:
    """Why an architecture could not be traced, in one line."""
    import transformers

    kind = getattr(config, "model_type", "?")
    return (
        f"cannot predict a {kind} model in this environment (transformers {transformers.__version__}): "
        f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    ).rstrip(": ")


def predict(
    plan: LaunchPlan, config: Any | None = None, *, batch: tuple[int, int] | None = None, count_rows: bool = True
) -> MemoryPrediction:
    """The plan's peak per device for its worst batch (every row at modelMaxLength), or for `batch`
    (rows, padded length): the batch a run measured its peak at, to check the prediction against it.
    `count_rows`: also the dataset's prompt lengths under the model's tokenizer (before a run; a run that
    already counted its rows passes False)."""
    started = time.perf_counter()
    origin, source = config_source(plan) if config is None else ("given by the caller", None)
    shape = step_shape(plan)
    if batch is not None:
        shape = dataclasses.replace(shape, batch=batch[0], seq=batch[1])
    s = sharding(plan)
    gptq = plan.method == "gptq-lora"
    given = config
    trace = step_trace(
        lambda: given if given is not None else read_config(plan)[0], shape, traced_fsdp(s, gptq=gptq), source
    )
    peak = predict_step(None, shape, s, gptq=gptq, trace=trace)
    notes = [
        f"architecture: {origin}",
        f"the batch the run measured: {shape.batch} row(s) of {shape.seq} tokens per device"
        if batch is not None
        else f"the worst batch: {shape.batch} row(s) of modelMaxLength {shape.seq} tokens per device",
        f"AdamW {'foreach' if shape.device == 'cuda' else 'per-tensor'} as torch runs it on {shape.device}",
        "loss: trl's fused LM head (SFTTrainer's)" if shape.fused_lm_head else "loss: transformers' (logits in full)",
    ]
    notes.extend(stack().notes)
    if str(plan.training.attn_implementation) in FLASH:
        notes.append(
            f"{plan.training.attn_implementation} traced as sdpa's memory-efficient kernel (the same O(seq) state)"
        )
    if plan.method == "gptq-lora":
        notes.append(
            "estimate: GPTQ base weights counted as 4-bit with group-128 scales and zeros; the kernels' "
            "dequantisation temporaries are not traced"
        )
    if traced_fsdp(s, gptq=plan.method == "gptq-lora") is not None:
        notes.append(
            f"FSDP traced as FSDP2 fully_shard over {s.ranks} fake ranks (each decoder layer, then the root)"
            + (
                f", {peak.unsharded_gradients / 2**30:.1f} GiB of the peak unsharded gradients between the "
                f"{shape.gradient_accumulation} micro-steps (no_sync)"
                if peak.unsharded_gradients
                else ""
            )
        )
    elif s.fsdp1 and s.ranks > 1:
        notes.append(
            "FSDP1 computed from the single-rank trace: flat parameters, the root unit gathered from forward to "
            "the end of backward"
            + (
                ", what trains upcast to float32 by accelerate's mixed precision (16 bytes per trained parameter)"
                if s.master_factor > 1
                else ", what trains in the load dtype (no mixed precision: accelerate does not upcast)"
            )
            + (
                f", {peak.unsharded_gradients / 2**30:.1f} GiB of unsharded gradients between the "
                f"{shape.gradient_accumulation} micro-steps (no_sync)"
                if peak.unsharded_gradients
                else ""
            )
            + (f", experts placed per expert-parallel rank (fastMoe {s.expert_parallel})" if s.expert_parallel else "")
        )
    if peak.trace.routing:
        notes.append(peak.trace.routing)
    if s.kind == "none" and plan.topology.world_size > 1:
        notes.append(
            "DataParallel: predicted for one device at the per-device batch; outputs gathered on GPU 0 not modelled"
        )
    lengths = _prompt_lengths(plan, notes) if count_rows else None
    split = peak.split
    return MemoryPrediction(
        peak_bytes=peak.bytes,
        split=MemorySplit(
            parameters_bytes=split.parameters,
            gradients_bytes=split.gradients,
            optimizer_bytes=split.optimizer,
            activations_bytes=split.other,
        ),
        phase=peak.phase,  # type: ignore[arg-type]
        activations_peak_bytes=peak.activations,
        unsharded_gradient_bytes=peak.unsharded_gradients,
        unsharded_gradients_in_peak=peak.unsharded_in_peak,
        expert_shapes_vary=peak.trace.routing is not None,
        expert_parallel=s.expert_parallel,
        device=shape.device,
        world_size=plan.topology.world_size,
        nodes=plan.topology.number_nodes,
        sharding=s.label,
        traced_parameters=peak.trace.parameters,
        trainable_parameters=peak.trace.trainable,
        seconds=round(time.perf_counter() - started, 3),
        notes=tuple(notes),
        prompt_tokens=[PromptLength(tokens=t, entries=n) for t, n in lengths.items()] if lengths else None,
    )


def _prompt_lengths(plan: LaunchPlan, notes: list[str]) -> dict[int, int] | None:
    """The dataset's prompt lengths under the model's tokenizer, or None with a note saying why (never an error:
    the run counts its rows when it starts)."""
    from ftbench_trainer.measure.prompt_table import NotCounted

    try:
        lengths = _cached_lengths(plan)
    except (NotCounted, OSError, ValueError, KeyError) as exc:  # no tokenizer, or a file it cannot read
        detail = str(exc) if isinstance(exc, NotCounted) else f"{type(exc).__name__}: {exc}"
        notes.append(f"{ROWS_NOTE_PREFIX}counted when the run starts ({detail})")
        return None
    notes.append(
        f"{ROWS_NOTE_PREFIX}{sum(lengths.values())} entries' prompts tokenized with {plan.model.name}'s tokenizer"
    )
    return lengths


_LENGTHS: dict[tuple[str, bool, str, str], dict[int, int]] = {}


def _cached_lengths(plan: LaunchPlan) -> dict[int, int]:
    """One count per model and dataset in a process (a batch of shapes, the predictor service)."""
    from ftbench_trainer.measure.prompt_table import plan_prompt_lengths

    key = (plan.model.ref, plan.model.generated, plan.dataset.model_dump_json(), str(plan.data_dir))
    if key not in _LENGTHS:
        _LENGTHS[key] = plan_prompt_lengths(plan)
    return _LENGTHS[key]


def _gptq(split: Split, trace: Trace) -> Split:
    quantized = int(trace.quantizable_weights * GPTQ_BYTES_PER_WEIGHT)
    fp16 = trace.quantizable_weights * 2
    return Split(max(0, split.parameters - fp16 + quantized), split.gradients, split.optimizer, split.other)
