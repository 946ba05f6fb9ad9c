"""Run the trainer's memory predictor for a spec on this machine (`ftbench predict`).

The plan is built as the operator builds it (no local GPU check: predicting a GPU run on a
CPU-only machine is the point), and `python -m ftbench_trainer.predict` runs in the engine's
environment, because the loss path, and so the peak, depends on that environment's transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import Runtime
from ftbench.contracts.env import FTBENCH_PREDICT_PROCESSES
from ftbench.contracts.plan import ExperimentRef, LaunchPlan
from ftbench.contracts.prediction import MemoryPrediction, parse_batch_line, parse_prediction_line
from ftbench.local import resident
from ftbench.local.runner import LocalRunError, TrainerPython
from ftbench.render.plan import build_plan

PREDICTOR_MODULE = "ftbench_trainer.predict"
MOST_PREDICTORS = 4  # processes one batch spreads over by default (each imports torch: ~1 GB resident)
# Groups of plans per extra predictor: a new predictor pays its imports (about 4 s on a core) before its first
# trace, worth it for a sweep's several groups, not for --min-gpus' two (one GPU, several).
GROUPS_PER_PREDICTOR = 2


def prediction_plan(spec: FineTuneExperimentSpec, name: str, catalog: Catalog, profile: ClusterProfile) -> LaunchPlan:
    return build_plan(spec, catalog, profile, ref=ExperimentRef(name=name, namespace="local"), runtime=Runtime.JOB)


def answered(python: TrainerPython, mode: str, plans: list[str], timeout: float, lane: int = 0) -> tuple[str, str, int]:
    """(stdout, stderr, status) of `python -m ftbench_trainer.predict --plan/--batch` for `plans`: from the resident
    predictor of `lane` where it answers (ftbench.local.resident), else from a predictor process of its own."""
    env = python.environment()
    kept = resident.ask(python.path, env, mode, plans, timeout, lane)
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


def traces_shared(plan: LaunchPlan) -> str:
    """What decides the traces a plan's prediction makes, less its batch and GPU counts (a step family answers
    those, predict.step_family): plans of two values share no trace. One GPU is a step of its own (no sharding)."""
    wire = plan.model_dump(mode="json", by_alias=True)  # the plan as its JSON names it
    return json.dumps(
        [wire.get(k) for k in ("model", "method", "engine", "engineVersion", "training", "mixedPrecision", "useCpu",
                               "distributedBackend", "fsdp")] + [plan.topology.world_size == 1],
        sort_keys=True,
    )  # fmt: skip


def grouped(plans: list[LaunchPlan]) -> list[list[int]]:
    """The plans' indices grouped by the traces they share (`traces_shared`), the largest group first."""
    groups: dict[str, list[int]] = {}
    for i, plan in enumerate(plans):
        groups.setdefault(traces_shared(plan), []).append(i)
    return sorted(groups.values(), key=len, reverse=True)


def cores(env: Mapping[str, str] = os.environ) -> int:
    """Predictor processes a batch may spread over: `FTBENCH_PREDICT_PROCESSES`, else the cores this process may
    run on (a `taskset` pins it), at most MOST_PREDICTORS."""
    value = env.get(FTBENCH_PREDICT_PROCESSES, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        usable = os.cpu_count() or 1
    return max(1, min(MOST_PREDICTORS, usable))


def dealt(groups: list[list[int]], lanes: int) -> list[list[int]]:
    """The groups (largest first) dealt to `lanes` predictors, each to the one with the fewest plans so far: the
    plans of each predictor, a group's together."""
    bins: list[list[int]] = [[] for _ in range(lanes)]
    for group in groups:
        min(bins, key=len).extend(group)
    return [b for b in bins if b]


def run_batch(
    plans: list[LaunchPlan], python: TrainerPython, *, timeout: float = 3600.0
) -> list[MemoryPrediction | str]:
    """Predict many plans, for each plan, in order, its prediction or the one-line reason it has none. Plans that
    share traces go to one predictor process, which makes them once; groups that share none spread over the cores
    (`cores`), one predictor each (its own resident lane, or one process of its own), where there are
    GROUPS_PER_PREDICTOR groups for each."""
    groups = grouped(plans)
    lanes = dealt(groups, max(1, min(cores(), len(groups) // GROUPS_PER_PREDICTOR)))
    answers: list[MemoryPrediction | str | None] = [None] * len(plans)
    failures: list[LocalRunError] = []

    def work(lane: int) -> None:
        mine = lanes[lane]
        try:
            found = _one_batch([plans[i] for i in mine], python, timeout, lane)
        except LocalRunError as err:
            failures.append(err)
            return
        for i, answer in zip(mine, found, strict=True):
            answers[i] = answer

    workers = [threading.Thread(target=work, args=(lane,), daemon=True) for lane in range(1, len(lanes))]
    for worker in workers:
        worker.start()
    work(0)
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return [a for a in answers if a is not None]


def _one_batch(
    plans: list[LaunchPlan], python: TrainerPython, timeout: float, lane: int
) -> list[MemoryPrediction | str]:
    """The plans predicted in one predictor process (shared traces are made once)."""
    lines = [plan.to_json().replace("\n", " ") for plan in plans]
    stdout, stderr, _ = answered(python, "batch", lines, timeout, lane)
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
