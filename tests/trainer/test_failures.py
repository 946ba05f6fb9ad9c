"""Failure classification (seed 001's is_valid logic) with the real exception types, end to end
through the worker and `ftbench-trainer`'s exit code, result file and termination message."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_plan, read_result, run_trainer, tail, write_plan

from ftbench.contracts.results import (
    EXIT_FAILED,
    EXIT_GPU_OOM,
    EXIT_INVALID_PLAN,
    TERMINATION_MESSAGE_LIMIT,
    Outcome,
    TrainerResult,
)
from ftbench_trainer import main as trainer_main
from ftbench_trainer import worker
from ftbench_trainer.launch import merge_rank_results

torch = pytest.importorskip("torch")


def oom_errors() -> list[BaseException]:
    return [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)"),
        torch.cuda.OutOfMemoryError("CUDA out of memory."),
        RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
        RuntimeError("CUDA error: an illegal memory access was encountered"),
    ]


def other_errors() -> list[BaseException]:
    return [
        RuntimeError("NCCL Error 2: unhandled system error (run with NCCL_DEBUG=INFO for details)"),
        FileNotFoundError(2, "No such file or directory", "/data/missing.jsonl"),
        ValueError("response template not found"),
        MemoryError(),  # host memory, not GPU memory: seed 001 only names the GPU errors
    ]


@pytest.mark.parametrize("exc", oom_errors(), ids=lambda e: type(e).__name__ + ":" + str(e)[:20])
def test_gpu_oom_is_a_valid_measurement(exc: BaseException) -> None:
    result = worker.failure_result(exc, trial=3)
    assert result.outcome == Outcome.GPU_OOM and result.is_valid is False and result.reason == "GpuOutOfMemory"
    assert result.metrics is None and result.error is not None and result.trial == 3
    assert worker.EXIT_CODES[result.outcome] == EXIT_GPU_OOM
    TrainerResult.from_json(result.to_json())


def test_torch_oom_type_name_is_recorded() -> None:
    result = worker.failure_result(torch.OutOfMemoryError("CUDA out of memory."))
    assert result.error is not None and result.error.type == "torch.OutOfMemoryError"


@pytest.mark.parametrize("exc", other_errors(), ids=lambda e: type(e).__name__)
def test_other_errors_fail_with_type_and_message(exc: BaseException) -> None:
    result = worker.failure_result(exc)
    assert result.outcome == Outcome.FAILED and result.is_valid is None and result.metrics is None
    assert result.error is not None and result.error.type == type(exc).__qualname__ and result.error.message
    assert worker.EXIT_CODES[result.outcome] == EXIT_FAILED
    assert "isValid" not in result.to_json()  # Failed measurements record no properties


def test_termination_message_fits_even_with_a_huge_error() -> None:
    result = worker.failure_result(RuntimeError("x" * 100_000))
    assert len(result.to_termination_message().encode()) <= TERMINATION_MESSAGE_LIMIT


def test_any_rank_oom_decides_the_node_result() -> None:
    oom = worker.failure_result(torch.OutOfMemoryError("CUDA out of memory."))
    broken = worker.failure_result(RuntimeError("Connection closed by peer"))
    assert merge_rank_results([broken, oom], 1).outcome == Outcome.GPU_OOM
    assert merge_rank_results([broken, None], 1).outcome == Outcome.FAILED
    missing = merge_rank_results([None, None], 137)
    assert missing.outcome == Outcome.FAILED and missing.error is not None and "137" in missing.error.message
    # every rank measured and wrote success, then one aborted in teardown: the measurement stands
    ok = TrainerResult(outcome=Outcome.SUCCEEDED, is_valid=True)
    assert merge_rank_results([ok, ok], 1) is ok


def _plan(tmp_path: Path, tiny_model_dir: Path):
    plan = make_plan(tmp_path, tiny_model_dir, tmp_path / "data")
    return plan, write_plan(plan, tmp_path)


@pytest.mark.parametrize(
    ("exc", "code", "outcome"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB"), EXIT_GPU_OOM, Outcome.GPU_OOM),
        (RuntimeError("NCCL error: remote process exited"), EXIT_FAILED, Outcome.FAILED),
    ],
    ids=["oom", "nccl"],
)
def test_trainer_exit_code_result_file_and_termination_message(
    tmp_path: Path,
    tiny_model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    exc: BaseException,
    code: int,
    outcome: Outcome,
) -> None:
    """The real worker and main; training itself is replaced by a step raising the real exception."""

    def failing_train(*_: object, **__: object) -> TrainerResult:
        raise exc

    monkeypatch.setattr(worker, "_train", failing_train)
    plan, path = _plan(tmp_path, tiny_model_dir)
    assert trainer_main.main(["--plan", str(path)]) == code
    result = read_result(plan)
    assert result.outcome == outcome
    assert TrainerResult.from_json((tmp_path / "termination-log").read_text()) == result
    assert worker.rank_result_path(plan, 0).is_file()


def test_unreadable_plan_exits_invalid_plan(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text('{"schemaVersion": "nope"}')
    assert trainer_main.main(["--plan", str(bad)]) == EXIT_INVALID_PLAN


@pytest.mark.training
def test_missing_model_fails_in_a_real_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    plan = make_plan(tmp_path, tmp_path / "no-such-model", tmp_path / "data")
    plan = plan.model_copy(update={"model": plan.model.model_copy(update={"generated": False})})
    proc = run_trainer(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python", write_plan(plan, tmp_path))
    assert proc.returncode == EXIT_FAILED, tail(proc)
    result = read_result(plan)
    assert result.outcome == Outcome.FAILED and result.error is not None
    assert result.error.type == "FileNotFoundError"
    assert "not found at" in result.error.message and str(tmp_path / "no-such-model") in result.error.message


def test_launch_failure_is_reported(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PyTorchJob pod without the operator's env cannot find its place: Failed, with the reason."""
    from ftbench.contracts.enums import Runtime

    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    plan = make_plan(
        tmp_path,
        tiny_model_dir,
        tmp_path / "data",
        numberNodes=2,
        distributedBackend="DDP",
        runtime=Runtime.PYTORCH_JOB,
    )
    assert plan.rendezvous.source == "pytorchjob"
    assert trainer_main.main(["--plan", str(write_plan(plan, tmp_path))]) == EXIT_FAILED
    result = read_result(plan)
    assert result.error is not None and result.error.type.endswith("RendezvousEnvError")


def test_stability_trials_each_report_their_outcome(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without FTBENCH_TRIAL_INDEX, all of the plan's trials run in sequence, each with its own
    result file; an OOM or error in one trial is that trial's measurement (exit 0)."""
    from ftbench.contracts.enums import Experiment

    def trial_fails(plan: object, *, trial: int | None, started: object, network: object) -> TrainerResult:
        raise (torch.OutOfMemoryError("CUDA out of memory.") if trial == 1 else RuntimeError("NCCL error"))

    monkeypatch.delenv("FTBENCH_TRIAL_INDEX", raising=False)
    monkeypatch.setattr(worker, "_train", trial_fails)
    plan = make_plan(tmp_path, tiny_model_dir, tmp_path / "data", experiment=Experiment.FULL_STABILITY)
    assert plan.trials > 1
    assert trainer_main.main(["--plan", str(write_plan(plan, tmp_path))]) == 0
    outcomes = [
        TrainerResult.from_json(trainer_main.result_path(plan, t).read_text()).outcome for t in range(plan.trials)
    ]
    assert outcomes == [Outcome.FAILED, Outcome.GPU_OOM] + [Outcome.FAILED] * (plan.trials - 2)

    # One pod per trial (FTBENCH_TRIAL_INDEX set): that trial only, its exit code unless told otherwise.
    monkeypatch.setenv("FTBENCH_TRIAL_INDEX", "1")
    assert trainer_main.main(["--plan", str(write_plan(plan, tmp_path))]) == EXIT_GPU_OOM
    monkeypatch.setenv("FTBENCH_TRIAL_FAILURE_EXIT_ZERO", "true")
    assert trainer_main.main(["--plan", str(write_plan(plan, tmp_path))]) == 0
