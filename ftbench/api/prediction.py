"""Does a memory prediction fit the GPU it will run on? The verdict the CLI, validation and sweeps share.

Pure: a `MemoryPrediction` (tensor memory, traced) plus the profile's `gpuMemory` for the spec's
GPU model gives the device-level peak as NVML counts it (`ftbench.api.device_memory`: tensors, CUDA
context, the allocator's reserve, FSDP1's unsharded gradients under accumulation, communication buffers) and the verdict, `MemoryFit`. The
prediction is an estimate and says so: `fleetAccuracy` is how far it was from real GPUs on ado's fleet rows
like the run, and `borderline` marks a requirement within that 90th-percentile error of the capacity either
way (`BORDERLINE_FRACTION` where the fleet has no such rows), where the verdict could go either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

from pydantic import Field

from ftbench.api.api_model import ApiModel
from ftbench.api.device_memory import DeviceMemory, device_memory
from ftbench.api.fleet_accuracy import FleetAccuracy, fleet_accuracy, spec_kind
from ftbench.api.profile import ClusterProfile
from ftbench.api.rules_data import RowsThatTrain, rows_that_train
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.throughput import RunTimeEstimate, ThroughputPrediction, predict_throughput, run_time
from ftbench.catalog import Catalog
from ftbench.contracts.conditions import ConditionType
from ftbench.contracts.network import Collective, NetworkInEffect
from ftbench.contracts.prediction import MemoryPrediction

BORDERLINE_FRACTION: Final = 0.10
# The reason of a run refused for a predicted OOM (spec.run.oomPrecheck refuse): the operator writes it,
# sweeps read it (the point is skipped, not launched).
PREDICTED_OOM_REASON: Final = "PredictedOOM"


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
    fits: bool = Field(description="What must fit (every term but the allocator's reserve) is at most the capacity.")
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
        gib = 2**30
        verdict = "fits" if self.fits else "does not fit (predicted OOM)"
        edge = ", borderline" if self.borderline else ""
        terms = " + ".join(f"{t.name} {t.bytes / gib:.1f}" for t in self.device.terms if t.bytes) if self.device else ""
        return (
            f"predicted {self.predicted_total_bytes / gib:.1f} GiB per GPU as NVML counts it ({terms} GiB) of "
            f"{self.capacity_bytes / gib:.1f} GiB on {self.gpu_model}: {verdict}{edge}"
        )


def memory_fit(
    prediction: MemoryPrediction, gpu_model: str | None, profile: ClusterProfile, model_kind: str | None = None
) -> MemoryFit | None:
    """The verdict, or None where there is nothing to compare with (CPU ranks, a GPU model the profile lacks);
    `model_kind` (dense or MoE/hybrid, `fleet_accuracy.spec_kind`) picks the fleet's error band."""
    if prediction.device != "cuda" or not gpu_model or gpu_model not in profile.gpu_memory:
        return None
    device = device_memory(prediction, profile.gpu_memory[gpu_model])
    capacity = device.capacity_bytes
    accuracy = fleet_accuracy(prediction.world_size, prediction.nodes, model_kind)
    margin = accuracy.p90_percent_points / 100 if accuracy else BORDERLINE_FRACTION
    return MemoryFit(
        gpu_model=gpu_model,
        capacity_bytes=capacity,
        runtime_overhead_bytes=device.term("context"),
        predicted_total_bytes=device.total_bytes,
        predicted_percent=device.percent,
        fits=device.fits,
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
    throughput = predict_throughput(spec, catalog)
    rows = rows_of(prediction, spec, catalog)
    return PredictionReport(
        prediction=prediction.model_copy(update={"prompt_tokens": None}),  # the counts below say what status needs
        fit=memory_fit(prediction, spec.gpu_model, profile, spec_kind(spec, catalog)),
        rows_offered=rows.offered if rows is not None else None,
        rows_trained=rows.trained if rows is not None else None,
        throughput=throughput,
        run_time=run_time(spec, catalog, throughput) if throughput is not None else None,
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
