"""Run the trainer's memory predictor for a spec on this machine (`ftbench predict`).

The plan is built as the operator builds it (no local GPU check: predicting a GPU run on a
CPU-only machine is the point), and `python -m ftbench_trainer.predict` runs in the engine's
environment, because the loss path, and so the peak, depends on that environment's transformers.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import Runtime
from ftbench.contracts.plan import ExperimentRef, LaunchPlan
from ftbench.contracts.prediction import MemoryPrediction, parse_batch_line, parse_prediction_line
from ftbench.local import resident
from ftbench.local.runner import LocalRunError, TrainerPython
from ftbench.render.plan import build_plan

PREDICTOR_MODULE = "ftbench_trainer.predict"


def prediction_plan(spec: FineTuneExperimentSpec, name: str, catalog: Catalog, profile: ClusterProfile) -> LaunchPlan:
    return build_plan(spec, catalog, profile, ref=ExperimentRef(name=name, namespace="local"), runtime=Runtime.JOB)


def answered(python: TrainerPython, mode: str, plans: list[str], timeout: float) -> tuple[str, str, int]:
    """(stdout, stderr, status) of `python -m ftbench_trainer.predict --plan/--batch` for `plans`: from the resident
    predictor where it answers (ftbench.local.resident), else from a predictor process of its own."""
    env = python.environment()
    kept = resident.ask(python.path, env, mode, plans, timeout)
    if kept is not None:
        return kept
    with tempfile.TemporaryDirectory(prefix="ftbench-predict-") as tmp:
        path = Path(tmp) / "plans.jsonl"
        path.write_text("".join(plan + "\n" for plan in plans))
        proc = subprocess.run(
            [python.path, "-m", PREDICTOR_MODULE, f"--{mode}", str(path)],
            capture_output=True, text=True, env=env, timeout=timeout, check=False,
        )  # fmt: skip
    return proc.stdout, proc.stderr, proc.returncode


def run_batch(
    plans: list[LaunchPlan], python: TrainerPython, *, timeout: float = 3600.0
) -> list[MemoryPrediction | str]:
    """Predict many plans in one predictor process (shared traces are made once): for each plan, in order,
    its prediction or the one-line reason it has none."""
    lines = [plan.to_json().replace("\n", " ") for plan in plans]
    stdout, stderr, _ = answered(python, "batch", lines, timeout)
    answers = [a for a in map(parse_batch_line, stdout.splitlines()) if a is not None]
    if len(answers) != len(plans):
        lines = (stderr or "").strip().splitlines()
        raise LocalRunError(f"the memory predictor answered {len(answers)} of {len(plans)} plans: {lines[-1:] or ''}")
    return answers


def run_predictor(plan: LaunchPlan, python: TrainerPython, *, timeout: float = 600.0) -> MemoryPrediction:
    """The predictor's one FTBENCH_PREDICTION line, read from its stdout."""
    stdout, stderr, status = answered(python, "plan", [plan.to_json()], timeout)
    for line in stdout.splitlines():
        prediction = parse_prediction_line(line)
        if prediction is not None:
            return prediction
    lines = (stderr or stdout).strip().splitlines()
    last = lines[-1].removeprefix("ftbench: ") if lines else f"it exited {status} and said nothing"
    raise LocalRunError(f"no memory prediction for this spec: {last}")
