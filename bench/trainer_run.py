"""One `ftbench-trainer` run in a fresh process, as a pod runs it: the benches' shared runner.

`run_trainer` builds the plan the operator would (Job runtime, a throwaway profile whose storage is
under `root`, a free rendezvous port so runs never collide), runs the trainer with this interpreter
and returns its result; a run that exits non-zero raises with the tail of its output.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.contracts.enums import Runtime
from ftbench.contracts.plan import ExperimentRef
from ftbench.contracts.results import TrainerResult
from ftbench.host.ports import free_port
from ftbench.render.plan import build_plan


def run_trainer(
    root: Path, name: str, fields: dict[str, Any], data: Path, profile: dict[str, Any] | None = None
) -> TrainerResult:
    """Train the FineTuneExperiment spec `fields` once; datasets are generated into (and reused from) `data`;
    `profile`: more cluster-profile fields (a modelMap, say)."""
    spec = FineTuneExperimentSpec.model_validate(fields)
    out = Path(tempfile.mkdtemp(dir=root))
    storage = {"dataDir": str(data), "modelRoot": str(root / "models"), "hfHome": str(root / "hf")}
    overlay = {"storage": storage, "masterPort": free_port(), **(profile or {})}
    cluster = ClusterProfile.model_validate(overlay)
    plan = build_plan(
        spec,
        catalog_for(cluster),
        cluster,
        ref=ExperimentRef(name=name),
        runtime=Runtime.JOB,
        output_dir=str(out / "o"),
    )
    plan = plan.model_copy(
        update={"output": plan.output.model_copy(update={"termination_message_path": str(out / "termination")})}
    )
    plan_path = out / "plan.json"
    plan_path.write_text(plan.to_json())
    proc = subprocess.run([sys.executable, "-m", "ftbench_trainer.main", "--plan", str(plan_path)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return TrainerResult.from_json(Path(plan.output.result_file).read_text())
