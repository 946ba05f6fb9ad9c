"""The release matrix: every fms-hf-tuning release the API offers trains through `ftbench-trainer`.

Each release runs in its own environment (its lock from ftbench/engines/data, torch replaced by the
machine's CPU build: the one stated deviation), built and cached by `ftbench engines`. For every
installable release a LoRA run on the tiny model must succeed with exact token counts and name that
release in its result; per API class, the newest release that can run them also runs full
fine-tuning and prompt tuning; where the release catalog records a method as a defect of a release,
validation must refuse that combination up front. The runs are independent subprocesses, so they run two at a time.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import (
    dataset_file,
    fms_env_python,
    independent_lengths,
    make_plan,
    read_result,
    run_trainer,
    tail,
    write_plan,
)

from ftbench.api.validation import validate_spec_dict
from ftbench.contracts.enums import Experiment
from ftbench.contracts.results import EXIT_FAILED, EXIT_OK, REASON_ENGINE_MISMATCH, Outcome, TrainerResult
from ftbench.engines.releases import load_releases

pytestmark = [pytest.mark.training, pytest.mark.fms, pytest.mark.slow]

RELEASES = load_releases()
INSTALLABLE = [r.version for r in RELEASES.installable]
METHODS = {"full": Experiment.FULL, "lora": Experiment.LORA, "pt": Experiment.PROMPT_TUNING}
BATCH = 16  # the whole 16-row dataset in one step: the token counts must equal an independent count
OLDEST, DEFAULT = INSTALLABLE[-1], RELEASES.default
MINIMAL = {"experiment": Experiment.LORA.value, "model": "ftbench-tiny-llama", "modelMaxLength": 64, "numberGpus": 0,
           "batchSize": 2}  # fmt: skip


@dataclass(frozen=True)
class Job:
    release: str  # the release whose environment runs it
    method: str
    asks: str = ""  # the release the spec asks for (default: the one that runs)
    allow_mismatch: bool = False
    fsdp: bool = False  # two CPU ranks with FSDP (the release's own accelerate decides FSDP1 or FSDP2)

    @property
    def id(self) -> str:
        return (
            f"{self.release}-{self.method}"
            + (f"-asks-{self.asks}" if self.asks else "")
            + ("-allowed" if self.allow_mismatch else "")
            + ("-fsdp" if self.fsdp else "")
        )


@dataclass
class Ran:
    job: Job
    plan_dir: Path
    proc: subprocess.CompletedProcess[str]
    result: TrainerResult | None


def _fsdp_stacks() -> list[str]:
    """One release per distinct FSDP stack (accelerate, transformers, peft: what wraps, shards and saves; torch
    is the machine's CPU build for every release): the newest of each. Seven releases share one stack, and two
    CPU ranks per release were CI's longest fixture."""
    seen: dict[tuple[str | None, ...], str] = {}
    for version in INSTALLABLE:  # newest first
        stack = RELEASES.get(version).stack()
        seen.setdefault(tuple(stack.get(p) for p in ("accelerate", "transformers", "peft")), version)
    return list(seen.values())


FSDP_RELEASES = _fsdp_stacks()


def _jobs() -> list[Job]:
    jobs = [Job(v, m) for v, methods in RELEASES.matrix().items() for m in methods]
    jobs += [Job(OLDEST, "lora", asks=DEFAULT), Job(OLDEST, "lora", asks=DEFAULT, allow_mismatch=True)]
    return jobs + [Job(v, "lora", fsdp=True) for v in FSDP_RELEASES]


JOBS = _jobs()


def _run(job: Job, root: Path) -> Ran:
    tmp = root / job.id
    tmp.mkdir(parents=True)
    ranks = {"numberGpus": 2, "device": "cpu", "distributedBackend": "FSDP"} if job.fsdp else {}
    if job.fsdp and not RELEASES.get(job.release).fsdp2_full_state_dict:
        ranks["fsdpStateDictType"] = "SHARDED_STATE_DICT"  # FSDP2 on accelerate 1.6 takes nothing else
    plan = make_plan(tmp, tmp / "model", tmp / "data", engine="fms-hf-tuning", experiment=METHODS[job.method],
                     fmsHfTuningVersion=job.asks or job.release, batchSize=BATCH, maxSteps=1, **ranks)  # fmt: skip
    plan = plan.model_copy(update={"allow_engine_mismatch": job.allow_mismatch})
    proc = run_trainer(fms_env_python(job.release), write_plan(plan, tmp), timeout=600)
    result = read_result(plan) if Path(plan.output.result_file).is_file() else None
    return Ran(job, tmp, proc, result)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Ran]]:
    root = tmp_path_factory.mktemp("fms-matrix")
    for version in INSTALLABLE:  # build (or find) every environment first, one at a time
        fms_env_python(version)
    with ThreadPoolExecutor(2) as pool:
        yield {ran.job.id: ran for ran in pool.map(lambda j: _run(j, root), JOBS)}


def _succeeded(ran: Ran, release: str) -> TrainerResult:
    result = ran.result
    assert result is not None, tail(ran.proc)
    assert result.outcome == Outcome.SUCCEEDED, (result.error, tail(ran.proc))
    assert ran.proc.returncode == EXIT_OK
    assert result.environment is not None and result.metrics is not None
    assert result.environment.engine == "fms-hf-tuning" and result.environment.engine_version == release
    return result


@pytest.mark.parametrize("release", INSTALLABLE)
def test_lora_on_every_release(matrix: dict[str, Ran], release: str) -> None:
    ran = matrix[Job(release, "lora").id]
    result = _succeeded(ran, release)
    m, env = result.metrics, result.environment
    assert m is not None and env is not None
    assert env.torch_version.startswith(RELEASES.cpu_torch)
    assert env.transformers_version == RELEASES.get(release).stack()["transformers"]
    lengths = independent_lengths(ran.plan_dir / "model", dataset_file(ran.plan_dir / "data"), 1024)
    assert m.train_steps == 1 and m.train_samples == BATCH == len(lengths)
    assert m.train_non_padding_tokens == sum(lengths)
    assert m.train_tokens == BATCH * max(lengths)
    assert m.rows_offered == m.rows_trained == BATCH  # counted by this release's own collator
    assert m.trainable_parameters < m.model_parameters  # LoRA: adapters only
    assert env.command.startswith("python -m tuning.sft_trainer ") and "--peft_method lora" in env.command


@pytest.mark.parametrize("release", FSDP_RELEASES)
def test_fsdp_on_two_cpu_ranks_on_every_stack(matrix: dict[str, Ran], release: str) -> None:
    """FSDP really shards on CPU ranks under each release stack (FSDP_RELEASES): FSDP2 where its accelerate
    has it (>= 1.6), FSDP1 otherwise, each rank holding half of the parameters (read from the model)."""
    result = _succeeded(matrix[Job(release, "lora", fsdp=True).id], release)
    m, env = result.metrics, result.environment
    assert m is not None and env is not None
    assert env.distributed_mode == "FSDP" and env.world_size == 2 and env.fsdp is not None
    assert env.fsdp.version == max(RELEASES.get(release).fsdp_versions)
    assert len(m.rank_memory) == 2
    for r in m.rank_memory:
        assert r.parameter_bytes / m.model_parameter_bytes == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize(
    ("release", "method"),
    [(v, m) for v, methods in RELEASES.matrix().items() for m in methods if m != "lora"],
)
def test_full_and_prompt_tuning_on_the_newest_of_each_api(matrix: dict[str, Ran], release: str, method: str) -> None:
    result = _succeeded(matrix[Job(release, method).id], release)
    assert result.metrics is not None and result.metrics.train_samples == BATCH


@pytest.mark.parametrize(
    ("release", "method"), [(r.version, m) for r in RELEASES.releases for m in r.defects], ids=lambda v: str(v)
)
def test_known_defects_are_refused_up_front(release: str, method: str) -> None:
    experiment = METHODS[method]
    report = validate_spec_dict({**MINIMAL, "experiment": experiment.value, "fmsHfTuningVersion": release})
    assert not report.ok
    (issue,) = [i for i in report.issues if i.rule == "engine.fms-known-defect"]
    assert issue.path == "spec.fmsHfTuningVersion" and RELEASES.get(release).defects[method] in issue.message


def test_a_release_that_cannot_be_installed_is_refused() -> None:
    for r in RELEASES.releases:
        if not r.installable:
            report = validate_spec_dict({**MINIMAL, "fmsHfTuningVersion": r.version})
            assert any(i.rule == "engine.fms-installable" and r.reason in i.message for i in report.issues)


def test_another_release_than_asked_fails_before_training(matrix: dict[str, Ran]) -> None:
    ran = matrix[Job(OLDEST, "lora", asks=DEFAULT).id]
    assert ran.result is not None, tail(ran.proc)
    assert ran.result.outcome == Outcome.FAILED and ran.result.reason == REASON_ENGINE_MISMATCH
    assert ran.proc.returncode == EXIT_FAILED
    assert ran.result.error is not None
    assert (
        f"engine: the image carries fms-hf-tuning {OLDEST}, the experiment asks for {DEFAULT}"
        in ran.result.error.message
    )
    assert f"fms-hf-tuning-{DEFAULT}" in ran.result.error.message  # the image tag to build
    assert not (ran.plan_dir / "model").exists()  # refused before anything was built or trained


def test_another_release_runs_only_when_allowed_and_is_named(matrix: dict[str, Ran]) -> None:
    _succeeded(matrix[Job(OLDEST, "lora", asks=DEFAULT, allow_mismatch=True).id], OLDEST)
