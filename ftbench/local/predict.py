"""Run the trainer's memory predictor for a spec on this machine (`ftbench predict`).

The plan is built as the operator builds it (no local GPU check: predicting a GPU run on a
CPU-only machine is the point), and `python -m ftbench_trainer.predict` runs in the engine's
environment, because the loss path, and so the peak, depends on that environment's transformers.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import Runtime
from ftbench.contracts.plan import ExperimentRef, LaunchPlan
from ftbench.contracts.prediction import MemoryPrediction, parse_prediction_line
from ftbench.local.runner import LocalRunError, TrainerPython
from ftbench.render.plan import build_plan

PREDICTOR_MODULE = "ftbench_trainer.predict"


def prediction_plan(spec: FineTuneExperimentSpec, name: str, catalog: Catalog, profile: ClusterProfile) -> LaunchPlan:
    return build_plan(spec, catalog, profile, ref=ExperimentRef(name=name, namespace="local"), runtime=Runtime.JOB)


def run_predictor(plan: LaunchPlan, python: TrainerPython, *, timeout: float = 600.0) -> MemoryPrediction:
    """The predictor's one FTBENCH_PREDICTION line, read from its stdout."""
    env = {**os.environ}
    if python.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (python.pythonpath, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="ftbench-predict-") as tmp:
        plan_path = Path(tmp) / "plan.json"
        plan_path.write_text(plan.to_json())
        proc = subprocess.run(
            [python.path, "-m", PREDICTOR_MODULE, "--plan", str(plan_path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    for line in proc.stdout.splitlines():
        prediction = parse_prediction_line(line)
        if prediction is not None:
            return prediction
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
    raise LocalRunError(f"the memory predictor exited {proc.returncode} without a prediction:\n{tail}")
