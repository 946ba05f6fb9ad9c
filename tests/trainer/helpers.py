"""Shared helpers for the trainer tests (pytest only loads conftest.py, so these are imported).

Plans come from the real `build_plan` with a profile whose data and model directories are test
directories, then point at the session's tiny model: the tests run what a user's spec renders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts.enums import Experiment, Runtime
from ftbench.contracts.plan import ExperimentRef, LaunchPlan
from ftbench.contracts.results import EXIT_OK, TrainerResult
from ftbench.engines.envs import package_path
from ftbench.engines.releases import load_releases, version_tuple
from ftbench.host.ports import free_port
from ftbench.local.runner import TrainerPython
from ftbench.render.plan import build_plan

REPO_ROOT = Path(__file__).resolve().parents[2]
DATASET_ID = "news-chars-512-entries-4096"
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

# The newest offered fms-hf-tuning release: the single-release trainer tests run it (the release matrix,
# test_fms_releases.py, runs every other).
NEWEST_FMS = max((r.version for r in load_releases().installable), key=version_tuple)


def make_plan(
    tmp: Path,
    model_dir: Path,
    data_dir: Path,
    *,
    experiment: Experiment = Experiment.FULL,
    engine: str = "trl",
    entries: int = 16,
    runtime: Runtime = Runtime.JOB,
    **spec: Any,
) -> LaunchPlan:
    """A CPU plan (numberGpus 0) for the tiny model on a small news-chars dataset."""
    fields: dict[str, Any] = {
        "experiment": experiment,
        "engine": engine,
        "model": "ftbench-tiny-llama",
        "modelMaxLength": 1024,
        "numberGpus": 0,
        "batchSize": 4,
        "datasetId": DATASET_ID,
        "torchDtype": "float32",
        "gradientAccumulationSteps": 1,
        "gradientCheckpointing": False,
        "maxSteps": 3,
    }
    fields.update(spec)
    # A free rendezvous port per plan: plans run side by side (the release matrix runs two at a time).
    storage = {"dataDir": str(data_dir), "modelRoot": str(tmp / "models"), "hfHome": str(tmp / "hf")}
    profile = ClusterProfile.model_validate({"storage": storage, "masterPort": free_port()})
    plan = build_plan(
        FineTuneExperimentSpec.model_validate(fields),
        load_catalog(),
        profile,
        ref=ExperimentRef(name="test"),
        runtime=runtime,
        output_dir=str(tmp / "out"),
        dataset_entries=entries,
    )
    output = plan.output.model_copy(
        update={"termination_message_path": str(tmp / "termination-log"), "progress_interval_seconds": 0.0}
    )
    return plan.model_copy(update={"model": plan.model.model_copy(update={"ref": str(model_dir)}), "output": output})


def two_processes_one_node(tmp: Path, model_dir: Path, data_dir: Path, **spec: Any) -> LaunchPlan:
    """A 2-rank CPU plan on this machine: `numberGpus: 2, device: cpu` (two gloo processes)."""
    return make_plan(tmp, model_dir, data_dir, **{"numberGpus": 2, "device": "cpu", **spec})


def write_plan(plan: LaunchPlan, tmp: Path) -> Path:
    path = tmp / "plan.json"
    path.write_text(plan.to_json())
    return path


def run_trainer(
    python: Path | str, plan_path: Path, *, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`ftbench-trainer --plan` in a subprocess of the given environment's interpreter.

    ftbench's packages come through PYTHONPATH, as `ftbench run` passes them to an fms-hf-tuning
    environment (harmless for the main environment, which has them installed).
    """
    full_env = TrainerPython(str(python), package_path()).environment(**OFFLINE_ENV, **(env or {}))
    cmd = [str(python), "-m", "ftbench_trainer.main", "--plan", str(plan_path)]
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False)


def read_result(plan: LaunchPlan) -> TrainerResult:
    return TrainerResult.from_json(Path(plan.output.result_file).read_text())


def train(
    python: Path | str, plan: LaunchPlan, tmp: Path, *, timeout: float = 300
) -> tuple[TrainerResult, subprocess.CompletedProcess[str]]:
    """Run `plan` to a clean exit and read its result: the steps of every test of a run that must succeed
    (the test fails with the trainer's output tail when the exit code is not EXIT_OK)."""
    proc = run_trainer(python, write_plan(plan, tmp), timeout=timeout)
    assert proc.returncode == EXIT_OK, tail(proc)
    return read_result(plan), proc


def tail(proc: subprocess.CompletedProcess[str], n: int = 4000) -> str:
    return (proc.stdout + proc.stderr)[-n:]


def current_python() -> str:
    return sys.executable


def dataset_rows(path: str | Path, field: str = "output") -> list[str]:
    with open(path) as fh:
        return [json.loads(line)[field] for line in fh if line.strip()]


def independent_lengths(model_dir: Path | str, dataset_path: Path | str, max_length: int) -> list[int]:
    """Tokens per entry as both engines feed them: the whole row tokenized (BOS) + EOS, truncated.

    Computed with the tokenizer alone, not with any trainer code: the reference for the counts.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return [min(len(tok(text)["input_ids"]) + 1, max_length) for text in dataset_rows(dataset_path)]


def independent_prompt_lengths(model_dir: Path | str, dataset_path: Path | str) -> list[int]:
    """Tokens per entry up to and including the response template (BOS included), from the tokenizer alone:
    a row keeps a trained token exactly when this is below modelMaxLength."""
    from transformers import AutoTokenizer

    from ftbench.contracts.plan import RESPONSE_TEMPLATE

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompts = [text[: text.index(RESPONSE_TEMPLATE) + len(RESPONSE_TEMPLATE)] for text in dataset_rows(dataset_path)]
    return [len(tok(prompt)["input_ids"]) for prompt in prompts]


def dataset_file(data_dir: Path) -> Path:
    files = sorted(data_dir.glob("news-chars-512-entries-4096-*.jsonl"))
    assert len(files) == 1, files
    return files[0]


def fms_env_python(version: str) -> Path:
    """The interpreter of fms-hf-tuning `version`'s environment, built on first use (ftbench engines).

    With ``FTBENCH_REQUIRE_FMS=1`` (CI) an environment that cannot be built fails instead of skipping.
    """
    from ftbench.engines.envs import ensure_env

    try:
        return ensure_env(version)
    except Exception as exc:  # no uv, no network for a first build, ...
        reason = f"no environment for fms-hf-tuning {version}: {exc}"
        if os.environ.get("FTBENCH_REQUIRE_FMS") == "1":
            pytest.fail(f"FTBENCH_REQUIRE_FMS=1 but {reason}", pytrace=False)
        pytest.skip(reason)


def fresh_doc_section(path: Path, name: str, body: str) -> None:
    """Assert that the text between `<!-- NAME:start -->` and `<!-- NAME:end -->` in `path` is `body`
    (a table a test generated from what it measured); FTBENCH_UPDATE_GOLDEN=1 rewrites it first."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text()
    head, rest = text.split(start, 1)
    _, tail_ = rest.split(end, 1)
    fresh = f"{head}{start}\n{body}\n{end}{tail_}"
    if os.environ.get("FTBENCH_UPDATE_GOLDEN"):
        path.write_text(fresh)
    assert text == fresh, f"{path.name}'s {name} table is stale: FTBENCH_UPDATE_GOLDEN=1 rewrites it"


def accuracy_row(cells: list[str], predicted: int, measured: int) -> str:
    """A Markdown row of a prediction-accuracy table: the cells, predicted and measured MiB, the error."""
    mib = 2**20
    error = 100 * (predicted - measured) / measured
    return "| " + " | ".join([*cells, f"{predicted / mib:.2f}", f"{measured / mib:.2f}", f"{error:+.1f} %"]) + " |"
