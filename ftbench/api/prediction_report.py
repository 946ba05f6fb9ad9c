"""status.prediction's shape: the memory verdict, the device-level terms, the throughput and run-time estimates
and their fleet bands, as the CRD stores them and `ftbench predict -o json` prints them.

The shapes only, and how to read them back from a status; the arithmetic that fills them is ftbench.predict
(it imports the spec and the profile from here, so the shapes stay on this side).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import Field

from ftbench.api.api_model import ApiModel
from ftbench.api.calibration import CalibrationUsed
from ftbench.contracts.conditions import ConditionType
from ftbench.contracts.network import Collective, NetworkInEffect
from ftbench.contracts.prediction import MemoryPrediction

# The reason of a run refused for a predicted OOM (spec.run.oomPrecheck refuse): the operator writes it,
# sweeps read it (the point is skipped, not launched).
PREDICTED_OOM_REASON: Final = "PredictedOOM"
Bytes = Annotated[int, Field(ge=0)]


class DeviceTerm(ApiModel):
    name: str = Field(description="tensors, context, allocatorReserve, unshardedGradients or communication.")
    bytes: Bytes = Field(description="What the term adds to the device's peak.")


class DeviceMemory(ApiModel):
    """One device's predicted peak as NVML counts it, term by term (docs/measurements.md)."""

    terms: list[DeviceTerm] = Field(description="Each term of the device-level peak, largest cause first.")
    total_bytes: Bytes = Field(description="The sum of the terms: the predicted NVML peak.")
    capacity_bytes: Bytes = Field(description="The GPU model's memory (profile gpuMemory).")
    percent: Annotated[float, Field(ge=0, le=100)] = Field(
        description="The predicted NVML peak as a percentage of the capacity (at most 100: the allocator gives back "
        "its cache before it fails)."
    )
    required_bytes: Bytes = Field(
        description="What must fit for the run not to fail: every term but the reserve and the unsharded gradients."
    )
    fits: bool = Field(description="required_bytes is at most the capacity.")

    @property
    def tensor_bytes(self) -> int:
        return self.term("tensors")

    @property
    def dominant(self) -> str:
        return max(self.terms, key=lambda t: t.bytes).name

    def term(self, name: str) -> int:
        return next((t.bytes for t in self.terms if t.name == name), 0)


class Accuracy(ApiModel):
    """Which fleet rows a band comes from and how it was validated (shared by the memory and throughput bands)."""

    group: str = Field(description="Which fleet rows: the run's scope and the model's kind.")
    validation: str = Field(
        description="How the error was measured out of sample: 'grouped 5-fold' (a model the fleet has: its "
        "configurations predicted by constants fitted without them) or 'leave one model out' (a model the fleet "
        "has not: each model's rows predicted by constants fitted without that model); ', widened' where the "
        "question lies outside the calibration (the band times OUTSIDE_FACTOR, a stated guess)."
    )
    rows: Annotated[int, Field(ge=0)] = Field(description="Fleet rows of that group that ran and were predicted.")
    outside_calibration: list[str] = Field(
        default_factory=list,
        description="Each way the question lies outside what calibrated the prediction (GPU family, architecture, "
        "engine release, scale), one line each; empty inside.",
    )

    def outside_sentence(self) -> str:
        return (
            "; outside the calibration, so the band is widened: " + "; ".join(self.outside_calibration)
            if (self.outside_calibration)
            else ""
        )


class FleetAccuracy(Accuracy):
    """The memory prediction's out-of-sample error on ado's fleet rows like this run (docs/benchmarks.md)."""

    median_percent_points: Annotated[float, Field(ge=0)] = Field(
        description="Median |predicted - measured NVML peak| on those rows, in percentage points of the card."
    )
    p90_percent_points: Annotated[float, Field(ge=0)] = Field(
        description="90th percentile of the same: 9 in 10 of those rows were at most this far off."
    )

    def sentence(self) -> str:
        return (
            f"out of sample ({self.validation}) on {self.rows} fleet rows like this ({self.group}) the device-level "
            f"percent was within {self.p90_percent_points:.0f} points of ado's measured peak in 9 of 10 (median "
            f"{self.median_percent_points:.1f})" + self.outside_sentence()
        )


class ThroughputAccuracy(Accuracy):
    """The throughput prediction's out-of-sample error on ado's fleet rows like this run (docs/benchmarks.md)."""

    median_percent: Annotated[float, Field(ge=0)] = Field(
        description="Median |predicted - measured| / measured steady tokens/s on those rows, in percent."
    )
    p90_percent: Annotated[float, Field(ge=0)] = Field(
        description="90th percentile of the same: 9 in 10 of those rows were at most this far off."
    )

    def sentence(self) -> str:
        return (
            f"out of sample ({self.validation}) on {self.rows} fleet rows like this ({self.group}) tokens/s was "
            f"within {self.p90_percent:.0f} % of ado's measured in 9 of 10 (median {self.median_percent:.0f} %)"
            + self.outside_sentence()
        )


class ThroughputPrediction(ApiModel):
    """Predicted steady throughput of a spec (an estimate: see ftbench.predict.throughput for the model)."""

    tokens_per_second_estimate: Annotated[float, Field(ge=0)] = Field(
        description="Predicted steady tokens/s of all devices (padded tokens, rows assumed full length)."
    )
    tokens_per_gpu_per_second_estimate: Annotated[float, Field(ge=0)] = Field(
        description="tokensPerSecondEstimate / numberGpus."
    )
    step_seconds_estimate: Annotated[float, Field(ge=0)] = Field(description="Predicted optimizer step time.")
    mfu_percent_estimate: Annotated[float, Field(ge=0)] = Field(
        description="Predicted model FLOPs utilisation (the measured mfuPercent's accounting)."
    )
    compute_seconds: Annotated[float, Field(ge=0)] = Field(description="Compute per optimizer step.")
    overhead_seconds: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description="Per-layer framework time per optimizer step that does not scale with FLOPs (kernel "
        "launches, FSDP's hooks, a mixture of experts' loop over its experts).",
    )
    exposed_communication_seconds: Annotated[float, Field(ge=0)] = Field(
        description="Communication per optimizer step that compute does not hide."
    )
    dominant: Literal["compute", "overhead", "communication"] = Field(
        description="What takes most of the predicted step."
    )
    inter_node_bytes_per_gpu: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="Bytes each GPU moves across nodes per optimizer step in the collectives (0 on one node): "
        "divided by a measured bus bandwidth, the communication time.",
    )
    accuracy: ThroughputAccuracy | None = Field(
        None,
        description="How sure tokensPerSecondEstimate is: its out-of-sample error on ado's fleet rows like this run "
        "(grouped folds, or a model left out where the fleet lacks the model; widened outside the calibration).",
    )

    def with_bus_bandwidth(self, bytes_per_second: float) -> ThroughputPrediction:
        """The same step with the inter-node communication at a measured bus bandwidth (the network
        preflight's allGather busbw, nccl-tests' convention: bytes x (n - 1) / n per second)."""
        if self.inter_node_bytes_per_gpu <= 0 or bytes_per_second <= 0:
            return self
        tokens = self.tokens_per_second_estimate * self.step_seconds_estimate
        busy = self.compute_seconds + self.overhead_seconds
        exposed = max(0.0, self.inter_node_bytes_per_gpu / bytes_per_second - busy)
        step = busy + exposed
        return self.model_copy(update={
            "tokens_per_second_estimate": tokens / step,
            "tokens_per_gpu_per_second_estimate": self.tokens_per_gpu_per_second_estimate * self.step_seconds_estimate
            / step,
            "step_seconds_estimate": step,
            "mfu_percent_estimate": self.mfu_percent_estimate * self.step_seconds_estimate / step,
            "exposed_communication_seconds": exposed,
            "dominant": dominant(self.compute_seconds, self.overhead_seconds, exposed),
        })  # fmt: skip


def dominant(compute: float, overhead: float, exposed: float) -> Literal["compute", "overhead", "communication"]:
    """What takes most of a step."""
    if exposed > max(compute, overhead):
        return "communication"
    return "overhead" if overhead > compute else "compute"


class RunTimeEstimate(ApiModel):
    """Training time and device-hours the spec's stop settings imply at the predicted step time (an estimate:
    model loading and set-up are not in it; a run stopped by time is bounded by that time)."""

    steps_estimate: Annotated[int, Field(ge=0)] = Field(description="Optimizer steps per run.")
    seconds_estimate: Annotated[float, Field(ge=0)] = Field(
        description="Training seconds of all runs (repeats, trials)."
    )
    gpu_hours_estimate: Annotated[float, Field(ge=0)] = Field(description="seconds x GPUs / 3600.")
    bounded_by: Literal["maxSteps", "epochs", "stopAfterSeconds", "autoStop"] = Field(
        description="The stop setting that ends each run first at the predicted step time."
    )


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
        description="Predicted steady throughput (an estimate, ftbench.predict.throughput); unset on CPU ranks, for a "
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
