"""Time `ftbench predict` as a user meets it: whole processes on one core, cold and again (issue 63).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/predict_latency.py [--runs 2] [--sweep-runs 1] [--write-docs]
    HF_HUB_OFFLINE=1 .venv/bin/python bench/predict_latency.py --models llama3.2-1b --runs 1 --no-sweep  # (quick)

Every call is `ftbench predict FILE -o json` in a fresh process pinned to one core (taskset), timed from
start to exit. Cases, per catalog model and engine (trl; fms-hf-tuning 3.1.0):
- first call: nothing running and an empty trace store (FTBENCH_TRACE_CACHE a new folder for each run): the
  predictor's start, its imports, the traces, the report;
- cold, predictor running: a model never asked before, to the resident predictor an earlier call started and left
  running (the issue's "local predictor process the CLI starts and reuses"): one store per engine and run, the
  predictor started by a question about WARM_UP (untimed), then each model's spec in turn, each answer checked
  against the first call's;
- again: the same spec with the store the first call left;
- batch x2 / GPUs x2: a spec that differs only there, with that store (answered from the step family the cold
  call kept, predict.step_family, where it holds that step; else traced);
- --min-gpus after those (the issue's warm --min-gpus), and cold and again with a store of its own;
- a 100-point FineTuneSweep (batch x GPUs x sequence), cold and again: on one core, then on both of this machine's
  (its groups of plans that share no trace spread over two resident predictors, ftbench.local.predict.run_batch;
  its answer checked against the one-core one).
Calls with a store are answered as a user's are, by the resident predictor (ftbench.local.resident): a first call
starts one (each store is its own environment, so its own predictor), the calls after it ask it. Calls with no
store run a predictor process of their own (`FTBENCH_PREDICTOR=off`), so every kept answer is checked against
a one-shot, uncached one. A cold answer leaves its step's family to be recorded after it (two to four traces, done
while no question waits); the bench lets the resident finish them (`settle_all`, untimed) before the next call, as
a user reading the answer would. The residents are stopped after each model and after each engine's running
case (all under the cache root: the user's too). The running predictor has imported what WARM_UP's architecture
(llama) needs; the models after the first also find what earlier ones imported, as a user's running predictor
would.
An engine environment writes its bytecode on its first use; one call per engine before the table makes it, so
"first call" is a fresh process and an empty store, not a first import ever. Python writes bytecode by default, and
so does every call here (this machine's PYTHONDONTWRITEBYTECODE is dropped). Answers are checked, times never: a
call that fails, an answer from a kept trace or a running predictor that differs from the first call's, or a
batch x2 / GPUs x2 answer that differs from the same spec predicted with no store (the first run; every field but
the timings) exits 1. The table goes to stdout (and with --write-docs into docs/benchmarks.md, "Predict
latency").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ftbench.contracts.env import FTBENCH_PREDICTOR, FTBENCH_TRACE_CACHE
from ftbench.local.resident import settle_all, stop_all

REPO = Path(__file__).resolve().parents[1]
FTBENCH = str(Path(sys.executable).parent / "ftbench")
SECTION = "predict-latency"
# Dense, MoE (two) and hybrid models of the catalog, as the issue asks (>= 8, two MoE, one hybrid).
MODELS = (
    "llama3.2-1b",
    "llama3.1-8b",
    "mistral-7b-v0.1",
    "granite-3.3-8b",
    "granite-4.0-micro",
    "mixtral-8x7b-instruct-v0.1",
    "granite-3.0-1b-a400m-base",
    "granite-4.0-h-micro",
)
ENGINES = {"trl": {"engine": "trl"}, "fms-hf-tuning 3.1.0": {"engine": "fms-hf-tuning", "fmsHfTuningVersion": "3.1.0"}}
BASE: dict[str, Any] = {
    "experiment": "finetune_full_benchmark-v1.0.0",
    "datasetId": "news-tokens-16384plus-entries-4096",
    "modelMaxLength": 2048,
    "numberGpus": 4,
    "gpuModel": "NVIDIA-A100-SXM4-80GB",
    "batchSize": 8,
    "maxSteps": 50,
}
SWEEP_MATRIX = {
    "batchSize": [8, 16, 32, 64, 128],
    "numberGpus": [1, 2, 4, 8],
    "modelMaxLength": [512, 1024, 2048, 4096, 8192],
}
TIMINGS = {"seconds", "predictedInSeconds"}
WARM_UP = "smollm2-135m"  # a catalog model outside MODELS: the question that starts the running predictor
TWO_CORES = "0,1"  # the sweep's second case: this machine's two cores
RESIDENT_IDLE = "120"  # seconds: a case's calls follow each other; stop_all ends them after each model


class Wrong(Exception):
    """An answer that is wrong: the bench fails on it (never on a time)."""


def experiment(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneExperiment", "metadata": {"name": name}, "spec": spec}


def sweep(name: str, template: dict[str, Any]) -> dict[str, Any]:
    body = {"template": {k: v for k, v in template.items() if k not in SWEEP_MATRIX}, "matrix": SWEEP_MATRIX}
    return {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneSweep", "metadata": {"name": name}, "spec": body}


def without_timings(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: without_timings(v) for k, v in data.items() if k not in TIMINGS}
    if isinstance(data, list):
        return [without_timings(v) for v in data]
    return data


def call(doc: dict[str, Any], store: Path | None, work: Path, *extra: str, cores: str = "0") -> tuple[float, Any]:
    """(seconds, the JSON answer) of one `ftbench predict` process on `cores` (one unless told); no `store`: none
    kept or read."""
    path = work / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    env = {**os.environ, FTBENCH_TRACE_CACHE: str(store or "off"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           FTBENCH_PREDICTOR: RESIDENT_IDLE if store else "off"}  # fmt: skip
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    pin = ["taskset", "-c", cores] if shutil.which("taskset") else []
    started = time.perf_counter()
    proc = subprocess.run(
        [*pin, FTBENCH, "predict", str(path), "-o", "json", *extra], env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise Wrong(f"ftbench predict {path.name} {' '.join(extra)} exited {proc.returncode}: {proc.stderr[-800:]}")
    return seconds, json.loads(proc.stdout)


def same(cold: Any, kept: Any, what: str) -> None:
    if without_timings(cold) != without_timings(kept):
        raise Wrong(f"{what}: the answer from kept traces differs from the cold one")


def cold_and_again(
    doc: dict[str, Any],
    store: Path,
    work: Path,
    times: dict[str, list[float]],
    cold: str,
    again: str,
    *extra: str,
    cores: str = "0",
) -> Any:
    """Time `doc` with an empty store, then again with what it left; the second answer must equal the first (the
    answer)."""
    seconds, first = call(doc, store, work, *extra, cores=cores)
    times[cold].append(seconds)
    settle_all()
    seconds, kept = call(doc, store, work, *extra, cores=cores)
    times[again].append(seconds)
    same(first, kept, f"{doc['metadata']['name']} {again}")
    return first


def spread(times: list[float]) -> str:
    return f"{min(times):.1f} / {statistics.median(times):.1f} / {max(times):.1f}"


def name_of(model: str, engine: str) -> str:
    return f"{model.replace('.', '-')}-{ENGINES[engine]['engine']}"


def measure_running(models: list[str], engine: str, runs: int, root: Path) -> dict[str, tuple[list[float], Any]]:
    """Each model's spec asked, in turn, of one predictor left running (started by a question about WARM_UP): its
    times over `runs` and its first answer."""
    out: dict[str, tuple[list[float], Any]] = {model: ([], None) for model in models}
    for run in range(runs):
        store, work = root / f"running-{ENGINES[engine]['engine']}-{run}-store", root / f"running-{engine}-{run}"
        work.mkdir()
        call(experiment("warm-up", {**BASE, **ENGINES[engine], "model": WARM_UP}), store, work)
        settle_all()
        for model in models:
            seconds, answer = call(experiment(name_of(model, engine), {**BASE, **ENGINES[engine], "model": model}),
                                   store, work)  # fmt: skip
            settle_all()
            times, first = out[model]
            times.append(seconds)
            out[model] = (times, answer if first is None else first)
        stop_all()
    return out


def measure(
    model: str, engine: str, runs: int, root: Path, min_gpus: bool, running: tuple[list[float], Any]
) -> dict[str, list[float]]:
    """Every case of `model` under `engine`; `running`: its times and answer with a predictor running (the answer
    must be the first call's)."""
    spec = {**BASE, **ENGINES[engine], "model": model}
    name = name_of(model, engine)
    times: dict[str, list[float]] = {"first call": [], "cold, predictor running": running[0], "again": [],
                                     "batch x2": [], "GPUs x2": []}  # fmt: skip
    if min_gpus:
        times |= {"--min-gpus after predict": [], "--min-gpus cold": [], "--min-gpus again": []}
    for run in range(runs):
        store, work = root / f"{name}-{run}-store", root / f"{name}-{run}"
        work.mkdir()
        first = cold_and_again(experiment(name, spec), store, work, times, "first call", "again")
        if run == 0:
            same(first, running[1], f"{name} asked of a running predictor")
        for case, change in (("batch x2", {"batchSize": 16}), ("GPUs x2", {"numberGpus": 8})):
            doc = experiment(name, {**spec, **change})
            seconds, answer = call(doc, store, work)
            times[case].append(seconds)
            if run == 0:
                same(call(doc, None, work)[1], answer, f"{name} {case}")
        if min_gpus:
            doc = experiment(name, spec)
            times["--min-gpus after predict"].append(call(doc, store, work, "--min-gpus")[0])
            min_store = root / f"{name}-{run}-min-store"
            cold = cold_and_again(doc, min_store, work, times, "--min-gpus cold", "--min-gpus again", "--min-gpus")
            if run == 0:
                same(call(doc, None, work, "--min-gpus")[1], cold, f"{name} --min-gpus")
    return times


def measure_sweep(model: str, engine: str, runs: int, root: Path) -> dict[str, list[float]]:
    """The 100-point sweep cold and again on one core, then on two (TWO_CORES): the same answer."""
    template = {**BASE, **ENGINES[engine], "model": model}
    name = f"sweep-{model.replace('.', '-')}-{ENGINES[engine]['engine']}"
    times: dict[str, list[float]] = {}
    one_core: Any = None
    for cores, label in (("0", ""), (TWO_CORES, ", 2 cores")):
        cold, again = f"100-point sweep cold{label}", f"100-point sweep again{label}"
        times |= {cold: [], again: []}
        for run in range(runs):
            store, work = root / f"{name}-{run}-{len(cores)}-store", root / f"{name}-{run}-{len(cores)}"
            work.mkdir()
            answer = cold_and_again(sweep(name, template), store, work, times, cold, again, cores=cores)
            if run == 0 and one_core is None:
                one_core = answer
            elif run == 0:
                same(one_core, answer, f"{name} on two cores")
            stop_all()
    return times


def table(rows: list[tuple[str, str, dict[str, list[float]]]], runs: int, sweep_runs: int = 1) -> str:
    cases = list(dict.fromkeys(case for _, _, times in rows for case in times))
    head = "| model | engine | " + " | ".join(cases) + " |"
    lines = [head, "| " + " | ".join(["---"] * (2 + len(cases))) + " |"]
    for model, engine, times in rows:
        lines.append(
            f"| {model} | {engine} | " + " | ".join(spread(times[c]) if c in times else "" for c in cases) + " |"
        )
    summary = ""
    if rows:
        summary = (
            f"\n\nSeconds per whole `ftbench predict` process on one core, the sweep also on two (min / median / max of "
            f"{runs} runs; the 100-point sweep, on the first model, {sweep_runs}). Over {len(rows)} model x engine cases: "
            + "; ".join(f"{case} p50 {p50:.1f} s, p90 {p90:.1f} s" for case, (p50, p90) in percentiles(rows).items())
            + "."
        )
    return "\n".join(lines) + summary


def percentiles(rows: list[tuple[str, str, dict[str, list[float]]]]) -> dict[str, tuple[float, float]]:
    """The p50 and p90 (nearest rank) over the cases of each cold column."""
    out = {}
    for case in ("first call", "cold, predictor running"):
        medians = sorted(statistics.median(times[case]) for _, _, times in rows if times.get(case))
        if medians:
            out[case] = (statistics.median(medians), medians[min(len(medians) - 1, round(0.9 * (len(medians) - 1)))])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--models", help="comma-separated catalog models (default: the eight of MODELS)")
    parser.add_argument("--engines", help="comma-separated, of: " + ", ".join(ENGINES))
    parser.add_argument("--no-sweep", action="store_true", help="skip the 100-point sweep")
    parser.add_argument("--no-min-gpus", action="store_true", help="skip --min-gpus")
    parser.add_argument("--sweep-runs", type=int, default=1, help="runs of the 100-point sweep (default 1)")
    parser.add_argument("--write-docs", action="store_true", help="also into docs/benchmarks.md")
    args = parser.parse_args()
    models = args.models.split(",") if args.models else list(MODELS)
    engines = args.engines.split(",") if args.engines else list(ENGINES)

    def body(root: Path) -> str:
        rows: list[tuple[str, str, dict[str, list[float]]]] = []
        for engine in engines:  # the first use of each engine's environment writes its bytecode: not timed
            call(experiment("warm-up", {**BASE, **ENGINES[engine], "model": models[0]}), root / "warm-up", root)
        stop_all()
        for engine in engines:
            running = measure_running(models, engine, args.runs, root)
            for i, model in enumerate(models):
                min_gpus = i == 0 and not args.no_min_gpus
                times = measure(model, engine, args.runs, root, min_gpus, running[model])
                if i == 0 and not args.no_sweep:
                    times |= measure_sweep(model, engine, args.sweep_runs, root)
                stop_all()
                rows.append((model, engine, times))
                print(f"{model} {engine}: " + ", ".join(f"{k} {spread(v)}" for k, v in times.items()), flush=True)
        return table(rows, args.runs, args.sweep_runs)

    return run_and_publish("ftbench-predict-latency-", SECTION, args.write_docs, body)


def run_and_publish(prefix: str, section: str, write_docs: bool, body: Callable[[Path], str]) -> int:
    """`body` run in a scratch folder and its table published (docs/benchmarks.md with `write_docs`); exit 1 on a
    wrong answer."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        text = body(root)
    except Wrong as err:
        print(f"wrong answer: {err}", file=sys.stderr)
        return 1
    finally:
        stop_all()
        shutil.rmtree(root, ignore_errors=True)
    sys.path.insert(0, str(REPO / "bench"))
    from fleet_throughput import publish

    publish(section, text, write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
