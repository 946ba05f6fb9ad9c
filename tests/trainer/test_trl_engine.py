"""Real trl training on CPU through `ftbench-trainer`: full, LoRA and prompt tuning, exact counts.

Each run is a subprocess (like a pod): accelerate and torch.distributed keep process-wide state.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import (
    dataset_file,
    independent_lengths,
    independent_prompt_lengths,
    make_plan,
    read_result,
    run_trainer,
    train,
    two_processes_one_node,
    write_plan,
)

from ftbench.contracts.enums import Experiment, Runtime
from ftbench.contracts.progress import parse_progress_line
from ftbench.contracts.results import EXIT_FAILED, EXIT_OK, REASON_TOO_FEW_TRAINED_ROWS, Outcome, TrainerResult
from ftbench_trainer.inputs import resolve_dataset

pytestmark = [pytest.mark.training, pytest.mark.slow]
PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


def _train(tmp: Path, model: Path, data: Path, **spec: object) -> tuple[TrainerResult, str]:
    plan = make_plan(tmp, model, data, **spec)  # type: ignore[arg-type]
    result, proc = train(PYTHON, plan, tmp)
    # The termination message is the same result, compact and within Kubernetes' limit.
    message = (tmp / "termination-log").read_bytes()
    assert len(message) <= 4096
    assert TrainerResult.from_json(message.decode()) == TrainerResult.from_json(result.to_json())
    return result, proc.stdout


@pytest.mark.parametrize(
    ("experiment", "frozen_base"),
    [(Experiment.FULL, False), (Experiment.LORA, True), (Experiment.PROMPT_TUNING, True)],
    ids=["full", "lora", "pt"],
)
def test_trl_trains_and_reports(
    tmp_path: Path, tiny_model_dir: Path, data_dir: Path, experiment: Experiment, frozen_base: bool
) -> None:
    result, stdout = _train(tmp_path, tiny_model_dir, data_dir, experiment=experiment, maxSteps=3)
    assert result.outcome == Outcome.SUCCEEDED and result.is_valid is True
    m, env = result.metrics, result.environment
    assert m is not None and env is not None
    assert env.engine == "trl" and env.world_size == 1 and env.distributed_mode == "NO" and env.device == "cpu"
    assert m.train_steps == 3 and m.stopped_by == "maxSteps"
    assert m.train_samples == 12  # 3 steps x batch 4
    assert 0 < m.train_non_padding_tokens <= m.train_tokens
    assert m.train_runtime_seconds > 0
    assert m.train_steps_per_second == pytest.approx(3 / m.train_runtime_seconds)
    assert m.train_tokens_per_second == pytest.approx(m.train_tokens / m.train_runtime_seconds)
    assert m.dataset_tokens_per_second > 0
    # GPU figures do not apply on CPU: absent (n/a), never 0.0 that reads as measured; CPU use was sampled.
    assert m.gpu_compute_utilization_avg_percent is None and m.gpu_power_max_watts is None and m.mfu_percent is None
    assert m.cpu_compute_utilization_percent > 0
    assert (m.trainable_parameters < m.model_parameters / 10) == frozen_base
    # The memory prediction, checked on the run itself: trl's fused LM head traced as SFTTrainer runs it.
    assert m.cpu_tensor_peak_bytes > 0 and m.peak_batch_shape is not None and m.peak_batch_shape[0] == 4
    assert m.prediction_error_percent is not None and abs(m.prediction_error_percent) <= 5.0, m
    progress = [p for p in map(parse_progress_line, stdout.splitlines()) if p]
    assert [p["step"] for p in progress] == [1, 2, 3]  # interval 0 in the test plan: every step
    assert all(p["totalSteps"] == 3 for p in progress)


def test_token_counts_equal_an_independent_count(tmp_path: Path, tiny_model_dir: Path, data_dir: Path) -> None:
    """One step over the whole dataset (batch 16 of 16 entries): the counts do not depend on order.

    Non-padding tokens = sum of entry lengths; padded = 16 x the longest entry (right padding to
    the batch's longest row), both from the tokenizer alone.
    """
    result, _ = _train(tmp_path, tiny_model_dir, data_dir, batchSize=16, maxSteps=1)
    lengths = independent_lengths(tiny_model_dir, dataset_file(data_dir), 1024)
    assert len(lengths) == 16
    m = result.metrics
    assert m is not None
    assert m.train_samples == 16
    assert m.rows_offered == m.rows_trained == 16  # at 1024 tokens every response survives
    assert m.train_non_padding_tokens == sum(lengths)
    assert m.train_tokens == 16 * max(lengths)
    assert m.train_tokens > m.train_non_padding_tokens  # the rows really differ in length


def test_rows_whose_response_truncation_cuts_away_are_counted(
    tmp_path: Path, tiny_model_dir: Path, data_dir: Path
) -> None:
    """At a modelMaxLength between the prompts' lengths, rowsTrained is exactly the rows whose prompt is
    shorter (an independent count with the tokenizer alone); below every prompt, the run is refused before
    its first step with the counts and the fix, not trl's num_samples=0 traceback."""
    path, _ = resolve_dataset(make_plan(tmp_path, tiny_model_dir, data_dir))  # the trainer's own file
    prompts = independent_prompt_lengths(tiny_model_dir, path)
    cut = sorted(prompts)[len(prompts) // 2]
    result, _ = _train(tmp_path, tiny_model_dir, data_dir, modelMaxLength=cut, maxSteps=1)
    m = result.metrics
    assert m is not None and m.rows_offered == 16
    assert m.rows_trained == sum(p < cut for p in prompts) < 16
    refused = make_plan(tmp_path / "refused", tiny_model_dir, data_dir, modelMaxLength=min(prompts) - 1)
    proc = run_trainer(PYTHON, write_plan(refused, tmp_path))
    assert proc.returncode == EXIT_FAILED, proc.stderr[-2000:]
    failed = read_result(refused)
    assert failed.outcome == Outcome.FAILED and failed.reason == REASON_TOO_FEW_TRAINED_ROWS
    assert failed.error is not None and "0 of its 16 rows keep a trained token" in failed.error.message
    assert "raise modelMaxLength" in failed.error.message


def test_two_processes_on_cpu_sum_their_tokens(tmp_path: Path, tiny_model_dir: Path, data_dir: Path) -> None:
    """A real 2-process DDP run over gloo (the CPU notes' accelerate settings) for one epoch.

    Each rank sees half the entries, so the all-reduced non-padding count over the epoch equals
    the whole dataset's; the FSDP request is in effect on CPU ranks (tests/trainer/test_fsdp_cpu.py).
    """
    plan = two_processes_one_node(
        tmp_path, tiny_model_dir, data_dir, distributedBackend="FSDP", maxSteps=-1, numTrainEpochs=1.0
    )
    assert plan.launcher == "accelerate" and plan.topology.per_device_batch_size == 2
    result, _ = train(PYTHON, plan, tmp_path)
    m, env = result.metrics, result.environment
    assert m is not None and env is not None
    assert env.world_size == 2 and env.number_nodes == 1
    assert env.distributed_mode == "FSDP" and env.fsdp is not None
    assert m.train_steps == 4 and m.train_samples == 16 and m.stopped_by == "completed"
    lengths = independent_lengths(tiny_model_dir, dataset_file(data_dir), 1024)
    assert m.train_non_padding_tokens == sum(lengths)


def test_two_cpu_ranks_stop_together_at_the_precision_target(
    tmp_path: Path, tiny_model_dir: Path, data_dir: Path
) -> None:
    """spec.targetPrecisionPercent on two real ranks: both stop on the same step, well before the step
    budget, on a window whose interval is as tight as asked (the result's interval is the decision's)."""
    plan = two_processes_one_node(
        tmp_path, tiny_model_dir, data_dir, distributedBackend="DDP", maxSteps=400, warmupSteps=1,
        targetPrecisionPercent=25.0, precisionMinSteps=8, precisionMinSeconds=0.0,
    )  # fmt: skip
    assert plan.stop.target_precision == 0.25
    result, _ = train(PYTHON, plan, tmp_path)
    m = result.metrics
    assert m is not None and result.environment is not None and result.environment.world_size == 2
    assert m.stopped_by == "precisionTarget", m.stopped_by
    assert m.measured_steps >= 8 and m.train_steps < 400
    assert m.throughput_ci95_relative is not None and m.throughput_ci95_relative <= 0.25


def test_two_nodes_indexed_job_rendezvous(tmp_path: Path, tiny_model_dir: Path, data_dir: Path) -> None:
    """Two 'pods' of an Indexed Job on this machine: JOB_COMPLETION_INDEX is each one's node rank."""
    import os
    import subprocess

    from helpers import OFFLINE_ENV

    plan = make_plan(
        tmp_path,
        tiny_model_dir,
        data_dir,
        numberNodes=2,
        distributedBackend="DDP",
        runtime=Runtime.INDEXED_JOB,
        maxSteps=2,
    )
    assert plan.rendezvous.source == "indexedjob"
    path = write_plan(plan, tmp_path)
    env = {**os.environ, **OFFLINE_ENV}
    pods = [
        subprocess.Popen(
            [str(PYTHON), "-m", "ftbench_trainer.main", "--plan", str(path)],
            env={**env, "JOB_COMPLETION_INDEX": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    results = []
    for pod in pods:
        out, _ = pod.communicate(timeout=300)
        assert pod.returncode == EXIT_OK, out[-4000:]
        line = next(x for x in out.splitlines() if x.startswith("FTBENCH_RESULT "))
        results.append(TrainerResult.from_json(line.split(" ", 1)[1]))
    for r in results:
        assert r.environment is not None and r.metrics is not None
        assert r.environment.world_size == 2 and r.environment.number_nodes == 2
        assert r.metrics.train_steps == 2 and r.metrics.train_samples == 8  # 2 steps x 2 ranks x 2
    assert results[0].metrics == results[1].metrics  # every node reports the same all-reduced numbers


def test_lora_shape_comes_from_the_plan_alone(tmp_path: Path, tiny_model_dir: Path, data_dir: Path) -> None:
    """trl's LoraConfig and the predictor's step take r and loraAlpha from the plan, with no fallback of
    their own (they had 8 and 32, against the API's defaults of 4 and 16); a LoRA plan must carry both."""
    from pydantic import ValidationError

    from ftbench.api import effective
    from ftbench.contracts.plan import PeftSettings
    from ftbench_trainer.engines.trl import peft_config
    from ftbench_trainer.predict.plan_step import step_shape

    plan = make_plan(tmp_path, tiny_model_dir, data_dir, experiment=Experiment.LORA, r=16, loraAlpha=64)
    config = peft_config(plan, str(tiny_model_dir))
    assert (config.r, config.lora_alpha) == (16, 64)
    assert (step_shape(plan).lora_r, step_shape(plan).lora_alpha) == (16, 64)
    defaults = make_plan(tmp_path, tiny_model_dir, data_dir, experiment=Experiment.LORA).training.peft
    assert defaults.lora_shape() == (
        effective.DEFAULT_LORA_R,
        effective.DEFAULT_LORA_ALPHA,
        effective.DEFAULT_LORA_DROPOUT,
    )
    with pytest.raises(ValidationError, match="a LoRA plan sets r, loraAlpha and the dropout"):
        PeftSettings(method="lora")
