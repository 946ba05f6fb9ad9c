"""Does a memory prediction fit the GPU it will run on? The verdict the CLI, validation and sweeps share.

Pure: a `MemoryPrediction` (tensor memory, traced) plus the profile's `gpuMemory` for the spec's
GPU model gives the device-level peak as NVML counts it (`ftbench.predict.device_memory`: tensors, CUDA
context, the allocator's reserve, FSDP1's unsharded gradients under accumulation, communication buffers) and the verdict, `MemoryFit`. The
prediction is an estimate and says so: `fleetAccuracy` is how far it was from real GPUs on ado's fleet rows
like the run, and `borderline` marks a requirement within that 90th-percentile error of the capacity either
way (`BORDERLINE_FRACTION` where the fleet has no such rows), where the verdict could go either way.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from ftbench.api.prediction_report import MemoryFit, PredictionReport, RiskTerm
from ftbench.api.profile import ClusterProfile
from ftbench.api.rules.data import RowsThatTrain, rows_that_train
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.prediction import MemoryPrediction
from ftbench.predict.calibrate import Asked, calibrated_device, calibrated_throughput, used
from ftbench.predict.fleet_accuracy import Question, fleet_accuracy, question, scope, throughput_accuracy
from ftbench.predict.throughput import run_time

BORDERLINE_FRACTION: Final = 0.10


# Why the verdict leaves a device-level term out (ftbench.predict.device_memory): shown beside it when it matters.
LEFT_OUT_OF_VERDICT: Final = {
    "allocatorReserve": "the caching allocator frees its cached blocks and retries before it reports an OOM",
    "unshardedGradients": "FSDP's no_sync (FSDP1 and FSDP2 alike) holds them between accumulated micro-steps on "
    "CPU ranks and in ado's dense runs up to 8B, but ado's mixtral-8x7b and llama3.1-70b full runs ran without room "
    "for them (docs/measurements.md, limits)",
}


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
