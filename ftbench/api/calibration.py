"""The cluster profile's `calibration` section: corrections to the fleet-fitted predictions that a cluster's own
runs fitted (`ftbench calibrate`, ftbench.predict.calibrate), with the runs they came from and what they changed.

Versioned (`version`), validated like the rest of the profile, and read wherever the profile is: `ftbench
predict --profile FILE` and the operator (the chart's `clusterProfile`). Each correction says how many runs it
rests on; the errors are on those same runs (in sample), before and after.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field

from ftbench.api.api_model import ApiModel

CALIBRATION_VERSION: Final = 1
Fabric = Literal["rdma", "tcp"]


class CalibrationRun(ApiModel):
    """One run a calibration was fitted on."""

    source: str = Field(
        description="Where it came from: local:<run id>, cluster:<namespace>/<name>, ado:<file>:<line>."
    )
    model: str = Field(description="spec.model.")
    gpu_model: str = Field(description="spec.gpuModel.")
    engine: str = Field("", description="The engine and release it ran (fms-hf-tuning 3.1.0, trl).")
    experiment: str = Field("", description="spec.experiment (full fine-tuning, LoRA, ...).")
    number_gpus: Annotated[int, Field(ge=1)] = Field(description="spec.numberGpus.")
    number_nodes: Annotated[int, Field(ge=1)] = Field(1, description="spec.numberNodes.")
    tokens_per_second: Annotated[float, Field(gt=0)] | None = Field(
        None, description="The run's measured steady tokens/s (all GPUs), where it measured one."
    )
    memory_percent: Annotated[float, Field(ge=0, le=100)] | None = Field(
        None, description="The run's measured NVML peak as a percentage of the card, where it measured one."
    )
    step_time_ratio: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="Measured over predicted step time after the family and fabric corrections: what the model's "
        "own correction is made of (the nearest runs' median applies to a prediction).",
    )
    reserve_scale: Annotated[float, Field(ge=0)] | None = Field(
        None,
        description="What the allocator's reserve term would have to be multiplied by for the predicted total to "
        "equal the measured NVML peak, after the family's context offset (runs with a reserve of 0.5 GiB or more).",
    )


class FamilyCorrection(ApiModel):
    """A GPU family's corrections (ftbench.stats.flops.gpu_family: A100, H100, L40S, ...)."""

    runs: Annotated[int, Field(ge=0)] = Field(description="Runs on this family the corrections rest on.")
    compute_efficiency: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="Multiplies the compute efficiency the fleet fitted (the share of the data-sheet peak the "
        "matmuls reach); unset where the runs do not say (one model only on a family the fleet has).",
    )
    context_offset_bytes: int | None = Field(
        None,
        description="Added to the device-level context term (CUDA context, workspaces, what the allocator holds "
        "beyond the traced tensors), may be negative; unset where the runs do not say.",
    )


class ModelCorrection(ApiModel):
    """One model's own corrections over all its runs (after its family's). A prediction applies the median of the
    model's runs nearest its spec (runs[].stepTimeRatio, runs[].reserveScale); these are the model-wide medians."""

    runs: Annotated[int, Field(ge=0)] = Field(description="Runs of this model the corrections rest on.")
    step_time_factor: Annotated[float, Field(gt=0)] | None = Field(
        None, description="Median measured over predicted step time: the model's own efficiency on this cluster."
    )
    reserve_scale: Annotated[float, Field(ge=0)] | None = Field(
        None, description="Median multiplier of the allocator's reserve term for this model."
    )


class TermError(ApiModel):
    """A prediction's error on the calibration's own runs before and after it (in sample)."""

    quantity: Literal["tokensPerSecond", "memory"] = Field(description="What was predicted.")
    unit: Literal["percent", "percentagePoints"] = Field(
        description="percent: |predicted - measured| / measured; percentagePoints: of the card."
    )
    runs: Annotated[int, Field(ge=0)] = Field(description="Runs compared.")
    median_before: Annotated[float, Field(ge=0)] = Field(description="Median |error| with the fleet's constants.")
    p90_before: Annotated[float, Field(ge=0)] = Field(description="90th percentile |error| with the fleet's constants.")
    median_after: Annotated[float, Field(ge=0)] = Field(description="Median |error| with the calibration.")
    p90_after: Annotated[float, Field(ge=0)] = Field(description="90th percentile |error| with the calibration.")


class Calibration(ApiModel):
    """Corrections a cluster's own runs fitted (`ftbench calibrate --profile FILE`); docs/measurements.md,
    "Calibrated by your own runs"."""

    version: Literal[1] = Field(CALIBRATION_VERSION, description="The section's format; 1 is the only one.")
    name: Annotated[str, Field(min_length=1, max_length=63)] = Field(
        description="What predictions that use it name it by (status.prediction.calibration.name)."
    )
    fitted_at: str = Field(description="When it was fitted (UTC, ISO 8601).")
    runs: list[CalibrationRun] = Field(default_factory=list, description="The runs it was fitted on.")
    gpu_families: dict[str, FamilyCorrection] = Field(
        default_factory=dict, description="Per GPU family (A100, H100, H200, L40S, ...): its corrections."
    )
    fabrics: dict[Fabric, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="Inter-node bytes/s per GPU of FSDP's collectives, per fabric (rdma: RoCE/InfiniBand, tcp: "
        "sockets), where multi-node runs showed communication the compute does not hide.",
    )
    models: dict[str, ModelCorrection] = Field(default_factory=dict, description="Per model: its own corrections.")
    errors: list[TermError] = Field(default_factory=list, description="Before and after, on the runs themselves.")


class CalibrationUsed(ApiModel):
    """Which calibration a prediction used, and what of it applied to this spec (status.prediction.calibration)."""

    name: str = Field(description="The profile's calibration.name.")
    fitted_at: str = Field(description="When it was fitted.")
    runs: Annotated[int, Field(ge=0)] = Field(description="Runs it was fitted on.")
    applied: list[str] = Field(
        default_factory=list,
        description="The corrections that changed this prediction, one line each (empty: none applies to this "
        "spec's GPU family, fabric or model).",
    )
