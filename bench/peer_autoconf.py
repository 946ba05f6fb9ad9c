"""ftbench's out-of-sample predictions against IBM ado's own recommender, ado-autoconf 2.1.2, on ado's fleet sample A.

    bash bench/peer_autoconf_env.sh                   # the peer's own venv (once; ado-autoconf 2.1.2, AutoGluon 1.6.3)
    .venv/bin/python bench/peer_autoconf.py run       # train the peer per split, compare, write the store (~15 min)
    .venv/bin/python bench/peer_autoconf.py tabulate  # the tables again, from the store the step above wrote
    .venv/bin/python bench/peer_autoconf.py rescore   # ftbench's side again (its constants changed), the peer's kept

ado-autoconf predicts two things from six features (model name, method, GPUs, GPU model, sequence length, global
batch): whether a run fits (an AutoGluon classifier of ado's `is_valid`) and its tokens/s (an AutoGluon regressor of
`dataset_tokens_per_second`). Here both are trained on exactly the rows ftbench is validated on and predict exactly
the parts ftbench holds out:

- Rows: the clean rows of sample A as bench/fleet.py's `judge(STORE)` gives them. The classifier learns from the rows
  whose outcome is clear (`outcome` "ran" or "oom", bench/fleet.py `outcomes`); the regressor from the rows that ran
  with a measured tokens/s (bench/fleet_throughput.py `points`).
- Splits: grouped 5-fold (`grouped_folds`, whole configurations per fold) and leave one model out
  (`models_left_out`). The grouped folds are dealt as ftbench deals them for each check: over every judged row for
  the memory verdict (bench/fleet.py `out_of_sample`), over the throughput points for tokens/s
  (bench/fleet_throughput.py `validated`), so each held part is the same for both predictors.
- ftbench's side: the memory verdict of `held_out(judged, split)` (device.fits), the tokens/s error of
  `held_out_errors(points, split)`.
- The peer's side: bench/peer_autoconf_worker.py, run by the peer venv's python (it never imports ftbench, and
  ftbench never imports AutoGluon); its docstring says which of ado-autoconf's settings it uses and where they are
  read. Its time limit per fit keeps the whole run near a quarter of an hour on two shared cores.

Compared on the same held-out rows: fits/OOM accuracy, OOM recall, false-OOM rate, median and p90 |error| % of
tokens/s, and the fewest-GPU answer (bench/fleet.py `min_gpus_table`'s groups: same model, method, sequence and
batch, run at two or more GPU counts; does the fewest predicted to fit equal the fewest that ran). The per-row
predictions and the summary go to bench/results/peer-autoconf-sample-A.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet import REPO, STORE, judge, min_gpus_table
from fleet_throughput import points

from ftbench.predict.fit_folds import grouped_folds, models_left_out
from ftbench.predict.fit_folds import p90_or_none as _p90
from ftbench.predict.fit_memory import held_out
from ftbench.predict.fit_throughput import held_out_errors
from ftbench.predict.fleet_accuracy import GROUPED, MODEL_LEFT_OUT

PEER_VENV = Path(os.environ.get("PEER_VENV", "/root/.cache/ftbench/peer-autoconf"))
WORKER = Path(__file__).resolve().with_name("peer_autoconf_worker.py")
RESULT = REPO / "bench" / "results" / "peer-autoconf-sample-A.json"
SPLITS = (GROUPED, MODEL_LEFT_OUT)
PREDICTORS = ("ftbench", "ado-autoconf")
PEER = "ado-autoconf 2.1.2"


def features(spec: dict[str, Any]) -> dict[str, Any]:
    """ado-autoconf's six features, in ado's own column names, from a row's spec."""
    return {
        "model_name": spec["model"],
        "method": spec["experiment"].split("_")[1],  # finetune_full_benchmark / finetune_lora_benchmark
        "number_gpus": int(spec["numberGpus"]),
        "gpu_model": spec["gpuModel"],
        "tokens_per_sample": int(spec["modelMaxLength"]),
        "batch_size": int(spec["batchSize"]),
    }


# -- run ---------------------------------------------------------------------------------------------------------
def build_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The memory rows (clear outcome) and the tokens/s rows, each with ftbench's held-out answer per split."""
    judged = judge(STORE)
    specs = {j.line: j.spec for j in judged}
    memory_splits = {GROUPED: grouped_folds(specs), MODEL_LEFT_OUT: models_left_out(specs)}
    verdicts = {label: {j.line: j for j in held_out(judged, split)} for label, split in memory_splits.items()}
    memory = [
        {
            "line": j.line,
            **features(j.spec),
            "outcome": j.outcome,
            "is_valid": int(j.outcome == "ran"),
            **{f"split:{label}": split[j.line] for label, split in memory_splits.items()},
            **{f"ftbench_fits:{label}": bool(verdicts[label][j.line].device.fits) for label in SPLITS},
        }
        for j in judged
        if j.outcome and j.device is not None
    ]
    pts = points(STORE)
    point_specs = {p.line: p.spec for p in pts}
    tps_splits = {GROUPED: grouped_folds(point_specs), MODEL_LEFT_OUT: models_left_out(point_specs)}
    errors = {label: held_out_errors(pts, split) for label, split in tps_splits.items()}
    throughput = [
        {
            "line": p.line,
            **features(p.spec),
            "dataset_tokens_per_second": p.measured,
            **{f"split:{label}": split[p.line] for label, split in tps_splits.items()},
            **{f"ftbench_error:{label}": errors[label][i] for label in SPLITS},
        }
        for i, p in enumerate(pts)
    ]
    return memory, throughput


def run_peer(
    memory: list[dict[str, Any]], throughput: list[dict[str, Any]], limits: tuple[float, float]
) -> dict[str, Any]:
    """Train and predict with the peer's worker in the peer's venv; its predictions, keyed by split and line."""
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no peer venv at {PEER_VENV}: run `bash bench/peer_autoconf_env.sh` first")
    keep = ["line", "model_name", "method", "number_gpus", "gpu_model", "tokens_per_sample", "batch_size"]
    splits = [f"split:{label}" for label in SPLITS]
    request = {
        "splits": list(SPLITS),
        "classifier": [{k: r[k] for k in [*keep, "is_valid", *splits]} for r in memory],
        "regressor": [{k: r[k] for k in [*keep, "dataset_tokens_per_second", *splits]} for r in throughput],
        "time_limit_classifier": limits[0],
        "time_limit_regressor": limits[1],
    }
    with tempfile.TemporaryDirectory(prefix="peer-autoconf-") as scratch:
        source, target = Path(scratch) / "in.json", Path(scratch) / "out.json"
        source.write_text(json.dumps(request))
        subprocess.run([str(python), str(WORKER), str(source), str(target)], check=True)
        return dict(json.loads(target.read_text()))


def merge(memory: list[dict[str, Any]], throughput: list[dict[str, Any]], peer: dict[str, Any]) -> None:
    """Add the peer's answers to the rows (in place)."""
    for label in SPLITS:
        valid = peer["classifier"][label]
        for r in memory:
            r[f"peer_fits:{label}"] = valid[str(r["line"])] == 1
        rates = peer["regressor"][label]
        for r in throughput:
            predicted = rates[str(r["line"])]
            r[f"peer_tokens_per_second:{label}"] = predicted
            r[f"peer_error:{label}"] = abs(predicted - r["dataset_tokens_per_second"]) / r["dataset_tokens_per_second"]


def check_min_gpus(memory: list[dict[str, Any]]) -> None:
    """Our fewest-GPU count for ftbench must be bench/fleet.py's own (`min_gpus_table` on the held-out rows)."""
    judged = judge(STORE)
    specs = {j.line: j.spec for j in judged}
    for label, split in ((GROUPED, grouped_folds(specs)), (MODEL_LEFT_OUT, models_left_out(specs))):
        found = re.search(r"counts\) the fewest GPUs predicted to fit equals the fewest ado ran on in (\d+)",
                          min_gpus_table(held_out(judged, split)))  # fmt: skip
        ours = fewest_gpus(memory, f"ftbench_fits:{label}")[0]
        if found is None or int(found.group(1)) != ours:
            print(f"warning: fewest-GPU count for ftbench, {label}: {ours} here, fleet.min_gpus_table says "
                  f"{found.group(1) if found else '?'}", file=sys.stderr)  # fmt: skip


# -- tabulate ----------------------------------------------------------------------------------------------------
def fewest_gpus(memory: list[dict[str, Any]], key: str) -> tuple[int, int, list[dict[str, Any]]]:
    """bench/fleet.py min_gpus_table's groups, answered by the verdict under `key`: (agree, groups, the groups)."""
    groups: dict[tuple[str, str, int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in memory:
        groups[(r["model_name"], r["method"], r["tokens_per_sample"], r["batch_size"])].append(r)
    agree, out = 0, []
    for (model, method, seq, batch), members in sorted(groups.items()):
        counts = sorted({r["number_gpus"] for r in members})
        ran = [r["number_gpus"] for r in members if r["outcome"] == "ran"]
        if len(counts) < 2 or not ran:
            continue
        fits = [r["number_gpus"] for r in members if r[key]]
        truth, predicted = min(ran), (min(fits) if fits else None)
        agree += predicted == truth
        out.append({"model": model, "method": method, "seq": seq, "batch": batch, "gpu_counts": counts,
                    "fewest_ran": truth, "fewest_predicted": predicted})  # fmt: skip
    return agree, len(out), out


def scores(memory: list[dict[str, Any]], throughput: list[dict[str, Any]], fits: str, error: str) -> dict[str, Any]:
    """One predictor's scores on one split: `fits` and `error` are the row keys holding its answers."""
    ooms = [r for r in memory if r["outcome"] == "oom"]
    ran = [r for r in memory if r["outcome"] == "ran"]
    errors = [100 * r[error] for r in throughput]
    agree, groups, _ = fewest_gpus(memory, fits)
    return {
        "clear_rows": len(memory),
        "agree": sum(r[fits] == (r["outcome"] == "ran") for r in memory),
        "ooms": len(ooms),
        "oom_caught": sum(not r[fits] for r in ooms),
        "ran": len(ran),
        "false_oom": sum(not r[fits] for r in ran),
        "tps_rows": len(errors),
        "tps_median_pct": statistics.median(errors) if errors else None,
        "tps_p90_pct": _p90(errors),
        "fewest_gpus_agree": agree,
        "fewest_gpus_groups": groups,
    }


def summarize(memory: list[dict[str, Any]], throughput: list[dict[str, Any]]) -> dict[str, Any]:
    """Per split, per predictor, overall and per model (the model-left-out split's per-model table)."""
    keys = {"ftbench": ("ftbench_fits", "ftbench_error"), "ado-autoconf": ("peer_fits", "peer_error")}
    out: dict[str, Any] = {}
    for label in SPLITS:
        out[label] = {name: scores(memory, throughput, f"{f}:{label}", f"{e}:{label}") for name, (f, e) in keys.items()}
    models = sorted({r["model_name"] for r in memory} | {r["model_name"] for r in throughput})
    out["per model left out"] = {
        model: {
            name: scores(
                [r for r in memory if r["model_name"] == model],
                [r for r in throughput if r["model_name"] == model],
                f"{f}:{MODEL_LEFT_OUT}",
                f"{e}:{MODEL_LEFT_OUT}",
            )
            for name, (f, e) in keys.items()
        }
        for model in models
    }
    return out


def _frac(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f} %)" if whole else "-"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def tables(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        f"ftbench against {PEER} (AutoGluon {meta.get('autogluon', '?')}: OOM classifier and tokens/s regressor over "
        "model, method, GPUs, GPU model, sequence, batch), both trained without the held-out part and predicting it; "
        f"{meta['clear_rows']} clean rows of fleet sample A with a clear outcome ({meta['ooms']} OOM), "
        f"{meta['tps_rows']} with a measured tokens/s. Peer time limit per fit: classifier "
        f"{meta['time_limit_classifier']:.0f} s, regressor {meta['time_limit_regressor']:.0f} s.",
        "",
        "| split | predictor | fits/OOM agree | OOMs caught | false OOMs (of rows that ran) | tokens/s median "
        "\\|err\\| % | p90 \\|err\\| % | fewest GPUs right |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label in SPLITS:
        for name in PREDICTORS:
            s = summary[label][name]
            lines.append(
                f"| {label} | {name} | {_frac(s['agree'], s['clear_rows'])} | {_frac(s['oom_caught'], s['ooms'])} | "
                f"{_frac(s['false_oom'], s['ran'])} | {_num(s['tps_median_pct'])} | {_num(s['tps_p90_pct'])} | "
                f"{_frac(s['fewest_gpus_agree'], s['fewest_gpus_groups'])} |"
            )
    lines += [
        "",
        "Per model left out (its rows predicted by each predictor trained without any of them):",
        "",
        "| model | clear rows (OOM) | fits/OOM agree ftbench | ado-autoconf | OOMs caught ftbench | ado-autoconf | "
        "tokens/s rows | median \\|err\\| % ftbench | ado-autoconf | p90 \\|err\\| % ftbench | ado-autoconf |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for model, both in summary["per model left out"].items():
        f, p = both["ftbench"], both["ado-autoconf"]
        lines.append(
            f"| {model} | {f['clear_rows']} ({f['ooms']}) | {_frac(f['agree'], f['clear_rows'])} | "
            f"{_frac(p['agree'], p['clear_rows'])} | {f['oom_caught']}/{f['ooms']} | {p['oom_caught']}/{p['ooms']} | "
            f"{f['tps_rows']} | {_num(f['tps_median_pct'])} | {_num(p['tps_median_pct'])} | "
            f"{_num(f['tps_p90_pct'])} | {_num(p['tps_p90_pct'])} |"
        )
    lines += ["", verdict(summary)]
    return "\n".join(lines)


def verdict(summary: dict[str, Any]) -> str:
    """One line: who wins each measure on each split."""

    def rate(part: str, whole: str) -> Callable[[dict[str, Any]], float | None]:
        return lambda s: s[part] / s[whole] if s[whole] else None

    measures: list[tuple[str, Callable[[dict[str, Any]], float | None], bool]] = [
        ("fits/OOM accuracy", rate("agree", "clear_rows"), True),
        ("OOM recall", rate("oom_caught", "ooms"), True),
        ("false-OOM rate", rate("false_oom", "ran"), False),
        ("tokens/s median error", lambda s: s["tps_median_pct"], False),
        ("tokens/s p90 error", lambda s: s["tps_p90_pct"], False),
        ("fewest GPUs", rate("fewest_gpus_agree", "fewest_gpus_groups"), True),
    ]
    parts = []
    for label in SPLITS:
        said = []
        for name, value, higher in measures:
            a, b = value(summary[label]["ftbench"]), value(summary[label]["ado-autoconf"])
            if a is None or b is None or abs(a - b) < 1e-9:
                said.append(f"{name} tie")
            else:
                said.append(f"{name} {'ftbench' if (a > b) == higher else 'ado-autoconf'}")
        parts.append(f"{label}: " + ", ".join(said))
    return "Who wins: " + "; ".join(parts) + "."


def stored_peer(store: Path) -> dict[str, Any]:
    """The peer's answers as run_peer returned them, read back from a store `run` wrote (they depend on the rows
    and splits alone, never on ftbench's constants, so `rescore` need not train the peer again)."""
    data = json.loads(store.read_text())
    meta = data["meta"]
    peer: dict[str, Any] = {"classifier": {}, "regressor": {}, "fits": data["fits"], "autogluon": meta["autogluon"],
                            "seconds": meta["peer_seconds"], "run_seconds": meta["seconds"]}  # fmt: skip
    for label in SPLITS:
        peer["classifier"][label] = {str(r["line"]): int(r[f"peer_fits:{label}"]) for r in data["memory_rows"]}
        peer["regressor"][label] = {str(r["line"]): r[f"peer_tokens_per_second:{label}"]
                                    for r in data["throughput_rows"]}  # fmt: skip
    return peer


def run(limits: tuple[float, float], rescore: bool = False) -> str:
    """`rescore`: ftbench's held-out answers computed again, the peer's taken from the stored run."""
    started = time.time()
    memory, throughput = build_rows()
    check_min_gpus(memory)
    print(f"{len(memory)} clear rows, {len(throughput)} tokens/s rows; ftbench's held-out answers in "
          f"{time.time() - started:.0f} s; {'reading' if rescore else 'training'} the peer ...", file=sys.stderr,
          flush=True)  # fmt: skip
    peer = stored_peer(RESULT) if rescore else run_peer(memory, throughput, limits)
    merge(memory, throughput, peer)
    summary = summarize(memory, throughput)
    meta = {
        "peer": PEER,
        "autogluon": peer.get("autogluon"),
        "time_limit_classifier": limits[0],
        "time_limit_regressor": limits[1],
        "clear_rows": len(memory),
        "ooms": sum(r["outcome"] == "oom" for r in memory),
        "tps_rows": len(throughput),
        "peer_seconds": peer.get("seconds"),
        "seconds": peer.get("run_seconds", round(time.time() - started, 1)),  # rescore: the peer's run's
    }
    fewest = {
        label: {
            name: fewest_gpus(memory, f"{key}:{label}")[2]
            for name, key in (("ftbench", "ftbench_fits"), ("ado-autoconf", "peer_fits"))
        }
        for label in SPLITS
    }
    store = {"meta": meta, "summary": summary, "fewest_gpus": fewest, "fits": peer["fits"], "memory_rows": memory,
             "throughput_rows": throughput}  # fmt: skip
    RESULT.write_text(json.dumps(store, indent=1) + "\n")
    return tables(summary, meta)


SECTION = "peer-autoconf"


def tabulate(store: Path) -> str:
    data = json.loads(store.read_text())
    return tables(data["summary"], data["meta"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--time-limit-classifier", type=float, default=25.0, help="seconds per classifier fit")
    r.add_argument("--time-limit-regressor", type=float, default=30.0, help="seconds per regressor fit")
    sub.add_parser("rescore", help="ftbench's side again, the peer's answers kept from the store")
    t = sub.add_parser("tabulate")
    t.add_argument("--store", type=Path, default=RESULT)
    t.add_argument("--write-docs", action="store_true", help="also into docs/benchmarks.md")
    args = parser.parse_args()
    if args.cmd == "run":
        print(run((args.time_limit_classifier, args.time_limit_regressor)))
        return 0
    if args.cmd == "rescore":
        stored = json.loads(RESULT.read_text())["meta"]
        print(run((stored["time_limit_classifier"], stored["time_limit_regressor"]), rescore=True))
        return 0
    from fleet_throughput import publish

    publish(SECTION, tabulate(args.store), args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
