"""Time the predictor service under a burst of 50 experiments (issue 63): how long each answer waits.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/predictor_burst.py [--engine "fms-hf-tuning 3.1.0"] [--write-docs]

The service (`python -m ftbench_trainer.predict.serve`, as the chart runs it) starts in the engine's
environment, pinned to one core, with an empty trace store. 50 FineTuneExperiments of one catalog model
that differ in batch size and GPUs (1-16, two nodes for 16) are POSTed at once from 50 threads; each
answer's wait is timed from the burst's start. Then a second burst of the same 50, and a third of 50
others (other batch sizes) with what the first two kept. The service answers one plan at a time, so a
burst's p50 is the time to answer half of it. Every answer is checked against the same plan predicted
with no trace store (one predictor process, untimed); a difference in any field but the timing, or a
failed request, exits 1. The table goes to stdout (with --write-docs into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.contracts.env import FTBENCH_TRACE_CACHE
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import HEALTH_PATH, PREDICT_PATH
from ftbench.local.predict import prediction_plan, run_batch
from ftbench.local.runner import TrainerPython, trainer_profile, trainer_python

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from predict_latency import Wrong, run_and_publish  # noqa: E402  (a bench script beside this one)

SECTION = "predictor-burst"
ENGINES = {"trl": {"engine": "trl"}, "fms-hf-tuning 3.1.0": {"engine": "fms-hf-tuning", "fmsHfTuningVersion": "3.1.0"}}
BASE: dict[str, Any] = {
    "experiment": "finetune_full_benchmark-v1.0.0",
    "datasetId": "news-tokens-16384plus-entries-4096",
    "modelMaxLength": 2048,
    "gpuModel": "NVIDIA-A100-SXM4-80GB",
    "maxSteps": 50,
}
GPUS = (1, 2, 4, 8, 16)
FIRST_BATCHES = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
OTHER_BATCHES = (6, 10, 20, 28, 40, 56, 80, 112, 160, 192)
TIMINGS = {"seconds"}


def plans(model: str, engine: str, batches: tuple[int, ...], python: TrainerPython) -> list[LaunchPlan]:
    profile = ClusterProfile()
    catalog = catalog_for(profile)
    out = []
    for gpus in GPUS:
        for batch in batches:
            nodes = {"numberNodes": 2} if gpus > 8 else {}
            body = {**BASE, **ENGINES[engine], "model": model, "numberGpus": gpus, "batchSize": batch, **nodes}
            spec = FineTuneExperimentSpec.model_validate(body)
            out.append(prediction_plan(spec, f"burst-{gpus}-{batch}", catalog, trainer_profile(profile, python)))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(url: str, plan: LaunchPlan) -> dict[str, Any]:
    request = urllib.request.Request(url, data=plan.to_json().encode(), method="POST")
    with urllib.request.urlopen(request, timeout=3600) as answer:
        return dict(json.loads(answer.read()))


def burst(url: str, batch: list[LaunchPlan]) -> tuple[list[float], list[dict[str, Any]]]:
    """Each plan's wait from the burst's start, and its answer."""
    started = time.perf_counter()

    def one(plan: LaunchPlan) -> tuple[float, dict[str, Any]]:
        answer = post(url, plan)
        return time.perf_counter() - started, answer

    with ThreadPoolExecutor(max_workers=len(batch)) as pool:
        done = list(pool.map(one, batch))
    return [t for t, _ in done], [a for _, a in done]


def without_timings(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in TIMINGS}


def check(answers: list[dict[str, Any]], uncached: list[Any], what: str) -> None:
    for answer, reference in zip(answers, uncached, strict=True):
        if isinstance(reference, str):
            raise Wrong(f"{what}: the uncached prediction failed: {reference}")
        expected = reference.model_dump(mode="json", by_alias=True)
        if without_timings(answer) != without_timings(expected):
            raise Wrong(f"{what}: an answer differs from the uncached one")


def measure(model: str, engine: str, root: Path, core: int) -> list[tuple[str, list[float]]]:
    spec = FineTuneExperimentSpec.model_validate(
        {**BASE, **ENGINES[engine], "model": model, "numberGpus": 1, "batchSize": 1}
    )
    python = trainer_python(spec)
    first, other = plans(model, engine, FIRST_BATCHES, python), plans(model, engine, OTHER_BATCHES, python)
    port = free_port()
    env = python.environment(**{FTBENCH_TRACE_CACHE: str(root / "store"), "OMP_NUM_THREADS": "1"})
    pin = ["taskset", "-c", str(core)] if shutil.which("taskset") else []
    cmd = [*pin, python.path, "-m", "ftbench_trainer.predict.serve", "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + HEALTH_PATH, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        rows = []
        for name, batch in (("cold burst", first), ("the same 50 again", first), ("50 others after", other)):
            waits, answers = burst(url + PREDICT_PATH, batch)
            rows.append((name, waits))
            check(answers, uncached(batch, python, root), f"{model} {engine} {name}")
            print(f"{model} {engine} {name}: p50 {statistics.median(waits):.1f} s", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return rows


_UNCACHED: dict[str, Any] = {}


def uncached(batch: list[LaunchPlan], python: TrainerPython, root: Path) -> list[Any]:
    """The plans predicted in one predictor process with no trace store (each plan once per bench)."""
    todo = [p for p in batch if p.to_json() not in _UNCACHED]
    if todo:
        os.environ[FTBENCH_TRACE_CACHE] = "off"
        for plan, answer in zip(todo, run_batch(todo, python), strict=True):
            _UNCACHED[plan.to_json()] = answer
    return [_UNCACHED[p.to_json()] for p in batch]


def table(model: str, engine: str, rows: list[tuple[str, list[float]]]) -> str:
    lines = ["| burst | answers | p50 wait (s) | p90 wait (s) | last answer (s) |", "| --- | --- | --- | --- | --- |"]
    for name, waits in rows:
        ordered = sorted(waits)
        p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
        lines.append(f"| {name} | {len(waits)} | {statistics.median(waits):.1f} | {p90:.1f} | {max(waits):.1f} |")
    return (
        "\n".join(lines)
        + f"\n\n{model} under {engine}: 50 FineTuneExperiments (batch size x GPUs 1-16) POSTed at once "
        "to the predictor service on one core, each answer's wait timed from the burst's start; every answer equal "
        "to the uncached one (all fields but the timing)."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3.1-8b")
    parser.add_argument("--engine", default="fms-hf-tuning 3.1.0", choices=list(ENGINES))
    parser.add_argument("--core", type=int, default=0, help="the CPU core the service is pinned to (default 0)")
    parser.add_argument("--write-docs", action="store_true", help="also into docs/benchmarks.md")
    args = parser.parse_args()
    return run_and_publish(
        "ftbench-predictor-burst-",
        SECTION,
        args.write_docs,
        lambda root: table(args.model, args.engine, measure(args.model, args.engine, root, args.core)),
    )


if __name__ == "__main__":
    sys.exit(main())
