"""Repeats and the warmup window in the API: what is accepted, what is refused with its fix, and
how repeats combine into one result (the operator and `ftbench run` share `api.repeats`)."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api import effective
from ftbench.api.repeats import combined_result, repeats_status
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import validate_spec_dict
from ftbench.catalog import load_catalog
from ftbench.contracts.quality import MeasurementQuality, NoiseFlag
from ftbench.contracts.results import Metrics, Outcome, RunError, TrainerResult
from ftbench.render.manifests import RenderError, render_experiment
from tests.operator.operator_testkit import lora_spec

CATALOG = load_catalog()
BASE = {"model": "ftbench-tiny-llama", "modelMaxLength": 256, "numberGpus": 0, "batchSize": 2, "maxSteps": 10}


def _issues(**fields: Any) -> list[str]:
    return [f"{i.rule}: {i.message}" for i in validate_spec_dict({**BASE, **fields}, CATALOG).issues]


def test_repeats_and_warmup_steps_are_accepted_and_planned() -> None:
    assert _issues(repeats=3, warmupSteps=9) == []
    spec = FineTuneExperimentSpec.model_validate({**BASE, "repeats": 3})
    assert effective.trials(spec, CATALOG) == 3 and effective.is_repeated(spec, CATALOG)
    plain = FineTuneExperimentSpec.model_validate(BASE)
    assert effective.trials(plain, CATALOG) == 1 and not effective.is_repeated(plain, CATALOG)
    stability = FineTuneExperimentSpec.model_validate({**BASE, "experiment": "finetune_full_stability-v1.0.0"})
    assert effective.trials(stability, CATALOG) == 5 and not effective.is_repeated(stability, CATALOG)


def test_impossible_repeats_and_warmups_are_refused_with_the_fix() -> None:
    [multi] = _issues(repeats=2, numberNodes=2, numberGpus=2, gpuModel="G", batchSize=2)
    assert multi.startswith("repeats.one-node: ") and "FineTuneSweep with repeats" in multi
    [warm] = _issues(warmupSteps=10)
    assert (
        warm == "steps.warmup: warmupSteps 10 leaves no measured step of maxSteps 10; use at most 9, or raise maxSteps"
    )
    assert _issues(warmupSteps=10, maxSteps=-1) == []  # epochs: the step count is not known in advance
    assert _issues(repeats=0) == ["schema: Input should be greater than or equal to 1"]  # at spec.repeats
    assert _issues(repeats=11) == ["schema: Input should be less than or equal to 10"]
    [stability] = _issues(experiment="finetune_full_stability-v1.0.0", repeats=2, maxSteps=-1)
    assert stability.startswith("experiment.full_stability.fixed: finetune_full_stability-v1.0.0 fixes repeats")


def test_a_pytorchjob_cannot_run_repeats() -> None:
    from ftbench.api.profile import ClusterProfile

    spec = FineTuneExperimentSpec.model_validate(lora_spec(repeats=2, run={"runtime": "PyTorchJob"}))
    with pytest.raises(RenderError, match="repeats 2 run sequential trials in fresh pods, which a PyTorchJob cannot"):
        render_experiment(spec, CATALOG, ClusterProfile(), name="x")


def _result(tps: float, flags: list[NoiseFlag] | None = None, steps: int = 10) -> TrainerResult:
    metrics = Metrics(
        train_runtime_seconds=1.0, train_steps=steps, train_samples=4, train_tokens=100, train_non_padding_tokens=90,
        train_samples_per_second=4.0, train_steps_per_second=10.0, train_tokens_per_second=tps,
        train_tokens_per_gpu_per_second=tps, dataset_tokens_per_second=tps, dataset_tokens_per_second_per_gpu=tps,
        steady_state_tokens_per_second=tps, step_time_mean_seconds=100 / tps, noise_flags=flags or [],
    )  # fmt: skip
    return TrainerResult(outcome=Outcome.SUCCEEDED, is_valid=True, metrics=metrics)


def test_repeats_combine_into_their_mean_with_an_interval_across_them() -> None:
    results = [_result(90.0, steps=9), _result(100.0, [NoiseFlag.HOST_CONTENTION], steps=10), _result(110.0, steps=12)]
    combined = combined_result(results)
    m = combined.metrics
    assert combined.outcome == Outcome.SUCCEEDED and m is not None
    assert (m.train_tokens_per_second, m.train_steps) == (pytest.approx(100.0), 10)  # counts stay integers
    half = 4.303 * 10 / 3**0.5
    assert m.steady_state_tokens_per_second_ci95_low == pytest.approx(100 - half, abs=1e-3)
    assert m.throughput_ci95_relative == pytest.approx(half / 100, abs=1e-5)
    assert m.noise_flags == [NoiseFlag.HOST_CONTENTION] and m.measurement_quality == MeasurementQuality.FLAGGED
    status = repeats_status(3, results)
    assert status.steady_state_tokens_per_second == [90.0, 100.0, 110.0] and status.cv == pytest.approx(0.1)
    assert repeats_status(3, results[:1]).ci95_low is None  # one repeat: no spread yet


def test_the_worst_repeat_decides_the_outcome() -> None:
    oom = TrainerResult(outcome=Outcome.GPU_OOM, is_valid=False, reason="GpuOutOfMemory",
                        error=RunError(type="torch.OutOfMemoryError", message="CUDA out of memory"))  # fmt: skip
    failed = TrainerResult(outcome=Outcome.FAILED, reason="TrainingError", error=RunError(type="E", message="boom"))
    assert combined_result([_result(1.0), failed, oom]).outcome == Outcome.GPU_OOM
    only_failed = combined_result([_result(1.0), failed])
    assert only_failed.outcome == Outcome.FAILED and only_failed.error is not None
    assert only_failed.error.message == "repeat 1: boom"
