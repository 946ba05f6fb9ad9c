"""ftbench's memory prediction held against ado's fleet: real A100/L40S runs of ado's SFTTrainer actuator.

    .venv/bin/python bench/fleet.py predict     # predict every clean row (minutes; one process per release)
    .venv/bin/python bench/fleet.py tabulate    # the tables, from the store the step above wrote
    .venv/bin/python bench/fleet.py tabulate --write-docs   # and into docs/benchmarks.md
    .venv/bin/python bench/fleet.py fit         # least squares of the device-level terms on the store

Rows are read with ftbench's own ado mapping (ftbench.local.ado_rows), turned into launch plans as the
operator builds them, and predicted in batches by `python -m ftbench_trainer.predict --batch` in each
fms-hf-tuning release's own environment (its transformers, its trl: the loss path is theirs). The store
(bench/results/fleet-sample-A.json) keeps every row's tensor prediction; `tabulate` adds the device-level
terms (ftbench.predict.device_memory) and compares with what ado measured: NVML's peak
(`gpu_memory_utilization_peak`) on the rows that ran, and fits/OOM on the rows whose outcome is clear.

Clean rows (the issue's): ado's two benchmark experiments, fms-hf-tuning 2.4.0 to 3.1.0, 80 GB GPUs.
A row's outcome is clear when it ran, or when it failed while a smaller batch or shorter sequence of
the same configuration ran and no larger one did (a larger run that succeeded says the failure was not
memory: several such rows fail and succeed at random in ado's table); a larger run with RoCE counts for a
row without it (`outcomes`: RDMA needs more GPU memory, not less).

Calibrate on sample A only: a disjoint sample of ado's table is kept aside to check the result.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from ftbench.predict.fit_folds import FOLDS, Bands
from ftbench.predict.fit_folds import p90_or_none as _p90
from ftbench.predict.fit_memory import Judged, all_bands, calibration_domain, fit_constants, out_of_sample
from ftbench.predict.fleet_accuracy import GROUPED, MODEL_LEFT_OUT

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "data" / "ado-fleet" / "fleet-sample-A.csv"
STORE = REPO / "bench" / "results" / "fleet-sample-A.json"
DOCS = REPO / "docs" / "benchmarks.md"
SECTION = "fleet-memory"
CONSTANTS = REPO / "ftbench" / "predict" / "constants.py"
# ado's parameters (the CSV's columns before its measurements): rows equal in all of them are repeats.
PARAMETERS = ("exp", "gc", "fk", "autostop", "method", "model_name", "number_nodes", "gpu_model", "number_gpus",
              "tokens_per_sample", "batch_size", "enable_roce", "fast_moe", "fms_hf_tuning_version")  # fmt: skip
CLEAN_EXPERIMENTS = ("finetune_full_benchmark-v1.0.0", "finetune_lora_benchmark-v1.0.0")
CLEAN_RELEASES = ("2.4.0", "2.7.1", "2.8.2", "3.0.0", "3.1.0")
GIB = 2**30


def clean(spec: dict[str, Any] | None) -> bool:
    return (
        spec is not None
        and spec["experiment"] in CLEAN_EXPERIMENTS
        and spec["fmsHfTuningVersion"] in CLEAN_RELEASES
        and "80GB" in str(spec.get("gpuModel", ""))
    )


def config_key(spec: dict[str, Any]) -> str:
    """A configuration: everything of the spec but the batch and the sequence length."""
    return json.dumps({k: v for k, v in spec.items() if k not in ("batchSize", "modelMaxLength")}, sort_keys=True)


def outcomes(rows: list[dict[str, Any]]) -> dict[int, str]:
    """line -> "ran" or "oom" for the rows whose outcome is clear (module docstring).

    A larger run that succeeded counts from the same configuration, and for a row without RoCE also from the
    same configuration with it: RoCE changes the network, not the step, and NCCL's RDMA transport keeps its
    buffers in GPU memory where sockets keep them in host memory, so a larger RoCE run that fit shows that a
    smaller run without RoCE did not fail for memory (ado's 4-node llama3.1-70b rows: the socket runs failed
    at 512 x 128 while the RoCE runs of 2048 x 128 ran, at half the card).
    """
    ran: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        if r["isValid"]:
            ran[config_key(r["spec"])].append((r["spec"]["modelMaxLength"], r["spec"]["batchSize"]))
    out = {}
    for r in rows:
        if r["isValid"]:
            out[r["line"]] = "ran"
            continue
        spec = r["spec"]
        seq, batch = spec["modelMaxLength"], spec["batchSize"]
        same = ran[config_key(spec)]
        with_rdma = [] if spec.get("enableRoce") else ran[config_key({**spec, "enableRoce": True})]
        smaller = any(s <= seq and b <= batch and (s, b) != (seq, batch) for s, b in same)
        larger = any(s >= seq and b >= batch for s, b in [*same, *with_rdma])
        if smaller and not larger:
            out[r["line"]] = "oom"
    return out


# -- predict ---------------------------------------------------------------------------------------------
def predict(sample: Path, store: Path, only: int | None) -> None:
    from ftbench.api.profile import ClusterProfile
    from ftbench.api.validation import validate_spec_dict
    from ftbench.catalog import load_catalog
    from ftbench.contracts.prediction import MAMBA_KERNELS_ENV
    from ftbench.engines.envs import ensure_env, package_path
    from ftbench.local.ado_rows import read_ado_csv
    from ftbench.local.predict import prediction_plan, run_batch
    from ftbench.local.runner import TrainerPython
    from ftbench.render.plan import PlanError

    catalog, profile = load_catalog(), ClusterProfile()
    # ado's images had mamba_ssm and causal_conv1d: its granite-4.0-h rows ran at about half the card,
    # which transformers' torch path for Mamba-2 layers cannot (it predicts several times more).
    os.environ[MAMBA_KERNELS_ENV] = "true"
    rows: list[dict[str, Any]] = []
    plans: dict[str, list[tuple[dict[str, Any], Any]]] = defaultdict(list)
    for ado in read_ado_csv(sample.read_text()):
        if not clean(ado.spec):
            continue
        assert ado.spec is not None
        row = {"line": ado.line, "spec": ado.spec, "isValid": ado.is_valid, "measured": ado.measured}
        rows.append(row)
        report = validate_spec_dict(ado.spec, catalog)
        if not report.ok or report.spec is None:
            row["refused"] = report.summary()
            continue
        try:
            plan = prediction_plan(report.spec, f"ado-{ado.line}", catalog, profile)
        except PlanError as err:
            row["refused"] = str(err)
            continue
        plans[ado.spec["fmsHfTuningVersion"]].append((row, plan))
    if only:
        plans = {k: v[:only] for k, v in plans.items()}
    for release, batch in sorted(plans.items()):
        started = time.perf_counter()
        python = TrainerPython(str(ensure_env(release)), package_path())
        answers = run_batch([plan for _, plan in batch], python)
        for (row, _), answer in zip(batch, answers, strict=True):
            if isinstance(answer, str):
                row["error"] = answer
            else:  # the notes are the same for every row of a kind: the store keeps the figures
                row["prediction"] = answer.model_dump(mode="json", by_alias=True, exclude={"notes"})
        print(f"fms-hf-tuning {release}: {len(batch)} rows in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps({"sample": sample.name, "rows": rows}, separators=(",", ":")) + "\n")


# -- tabulate ---------------------------------------------------------------------------------------------


def partners(rows: list[dict[str, Any]]) -> dict[int, str]:
    """line -> "ran" or "failed": what ado's other benchmark experiment (full against LoRA) did on the same
    configuration (every other parameter equal), where ado's table lists it on the adjacent line, as it lists
    most pairs. ado's memory figure is NVML's `used` of the whole device, sampled by AIM from the trainer's
    train begin (docs/measurements.md, "ado's rows"): it counts every process on the GPU, not only the run's."""
    by_line = {r["line"]: r for r in rows}

    def rest(spec: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in spec.items() if k != "experiment"}

    out = {}
    for r in rows:
        for near in (by_line.get(r["line"] - 1), by_line.get(r["line"] + 1)):
            if near and near["spec"]["experiment"] != r["spec"]["experiment"] and rest(near["spec"]) == rest(r["spec"]):
                out[r["line"]] = "ran" if near["isValid"] else "failed"
    return out


def judge(store: Path) -> list[Judged]:
    from ftbench.api.profile import DEFAULT_GPU_MEMORY
    from ftbench.contracts.prediction import MemoryPrediction
    from ftbench.predict.device_memory import device_memory

    data = json.loads(store.read_text())
    rows = data["rows"]
    clear = outcomes(rows)
    paired = partners(rows)
    out = []
    for r in rows:
        prediction = MemoryPrediction.model_validate(r["prediction"]) if "prediction" in r else None
        gpu = DEFAULT_GPU_MEMORY[r["spec"]["gpuModel"]]
        out.append(
            Judged(
                line=r["line"],
                spec=r["spec"],
                outcome=clear.get(r["line"]),
                measured_percent=r["measured"].get("gpu_memory_utilization_peak") if r["isValid"] else None,
                device=device_memory(prediction, gpu) if prediction else None,
                prediction=prediction,
                reason=r.get("refused") or r.get("error"),
                partner=paired.get(r["line"]),
            )
        )
    return out


def family(spec: dict[str, Any]) -> str:
    model = spec["model"]
    moe = ("a800m", "mixtral", "h-tiny", "h-small")
    return f"{model.split('-')[0]} {'MoE/hybrid' if any(m in model for m in moe) else 'dense'}"


def summary(judged: list[Judged]) -> dict[str, Any]:
    clear = [j for j in judged if j.outcome]
    answered = [j for j in clear if j.device]
    agree = [j for j in answered if j.device.fits == (j.outcome == "ran")]
    ran = [j for j in answered if j.measured_percent is not None]
    errors = [abs(j.device.percent - j.measured_percent) for j in ran]
    relative = [abs(j.device.percent - j.measured_percent) / j.measured_percent for j in ran if j.measured_percent]
    ooms = [j for j in answered if j.outcome == "oom"]
    fitted = [j for j in answered if j.outcome == "ran"]
    seconds = [j.prediction.seconds for j in judged if j.prediction]
    return {
        "rows": len(judged),
        "clear": len(clear),
        "answered": len(answered),
        "agree": len(agree),
        "baseline": len(fitted),  # predicting "fits" everywhere is right on every row that ran
        "ooms": len(ooms),
        "oom_caught": sum(not j.device.fits for j in ooms),
        "false_oom": sum(not j.device.fits for j in fitted),
        "ran": len(errors),
        "median": statistics.median(errors) if errors else None,
        "p90": _p90(errors),
        "relative_median": 100 * statistics.median(relative) if relative else None,
        "relative_p90": 100 * p if (p := _p90(relative)) is not None else None,
        "seconds_p50": statistics.median(seconds) if seconds else None,
    }


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def table(judged: list[Judged]) -> str:
    s = summary(judged)
    lines = [
        f"{s['rows']} clean rows of the sample; {s['clear']} with a clear outcome, {s['answered']} of them predicted. "
        f"Fits/OOM agrees on {s['agree']} of {s['answered']} ({100 * s['agree'] / max(1, s['answered']):.1f} %). "
        f"Device-level memory on the {s['ran']} rows that ran: |predicted - measured| median {_fmt(s['median'])}, "
        f"90th percentile {_fmt(s['p90'])} percentage points of the card. A prediction took a median "
        f"{_fmt(s['seconds_p50'])} s in the batch (one process per release, on one core).",
        "",
        "| model family | GPUs | clear rows | fits/OOM agree | rows that ran | median pp | p90 pp |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    groups: dict[tuple[str, int], list[Judged]] = defaultdict(list)
    for j in judged:
        groups[(family(j.spec), j.spec["numberGpus"])].append(j)
    for (fam, gpus), members in sorted(groups.items()):
        g = summary(members)
        lines.append(
            f"| {fam} | {gpus} | {g['clear']} | {g['agree']}/{g['answered']} | {g['ran']} | {_fmt(g['median'])} | "
            f"{_fmt(g['p90'])} |"
        )
    refused: dict[str, int] = defaultdict(int)
    for j in judged:
        if j.device is None and j.reason:
            for rule in re.findall(r"\[([^\]]+)\]", j.reason) or [j.reason]:
                refused[rule] += 1
    if refused:
        lines += ["", "Rows without a prediction, by the rule that refused them (ado refuses them too: their "
                  "`is_valid` is 0 for the same reason):", ""]  # fmt: skip
        lines += [f"- {rule}: {count} row(s)" for rule, count in sorted(refused.items())]
    return "\n".join(lines)


def validation_table(held: dict[str, list[Judged]]) -> str:
    """The headline three ways: in sample, grouped folds, one model left out (`out_of_sample`)."""
    lines = [
        "How the device-level terms' fit holds on rows it did not see: in sample (the fleet's constants, fitted on "
        f"every row); {GROUPED} (the configurations, `fold_group`, dealt to {FOLDS} folds, each predicted by "
        f"constants fitted on the other four); {MODEL_LEFT_OUT} (each model's rows predicted by constants fitted "
        "without any of them). The tensors are traced and not fitted, so only the fitted terms move. Baseline: "
        '"fits" for every row. Relative error: |predicted - measured| / measured percent (memory estimators publish '
        "it: LLMem 1.6 % on one GPU, 3.0 % on several).",
        "",
        '| validation | fits/OOM agree | baseline "fits" | OOMs caught | false OOMs (of rows that ran) | median pp | '
        "p90 pp | median relative % | p90 relative % |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, judged in held.items():
        s = summary(judged)
        lines.append(
            f"| {label} | {s['agree']}/{s['answered']} ({_pct(s['agree'], s['answered'])}) | {s['baseline']}/"
            f"{s['answered']} ({_pct(s['baseline'], s['answered'])}) | {s['oom_caught']}/{s['ooms']} | "
            f"{s['false_oom']}/{s['baseline']} | {_fmt(s['median'])} | {_fmt(s['p90'])} | "
            f"{_fmt(s['relative_median'])} | {_fmt(s['relative_p90'])} |"
        )
    return "\n".join(lines)


def model_left_out_table(held: dict[str, list[Judged]]) -> str:
    """Per model: its rows in sample, and predicted by constants fitted without it."""
    lines = [
        "Per model, its rows predicted in sample and with the model left out of the fit:",
        "",
        "| model | rows that ran | in-sample median pp | p90 pp | model left out: median pp | p90 pp | fits/OOM agree |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    models = sorted({j.spec["model"] for j in held["in sample"] if j.outcome and j.device})
    for model in models:
        mine, out = ([j for j in held[k] if j.spec["model"] == model] for k in ("in sample", MODEL_LEFT_OUT))
        a, b = summary(mine), summary(out)
        lines.append(f"| {model} | {a['ran']} | {_fmt(a['median'])} | {_fmt(a['p90'])} | {_fmt(b['median'])} | "
                     f"{_fmt(b['p90'])} | {b['agree']}/{b['answered']} |")  # fmt: skip
    return "\n".join(lines)


def rows_table(judged: list[Judged]) -> str:
    """Every clear row: what was predicted (each term) against what ado measured."""
    lines = [
        "| line | model, method | release | GPUs | seq x batch | tensors GiB | device GiB (%) | dominant | measured % | outcome |",
        "| ---: | --- | --- | ---: | --- | ---: | ---: | --- | ---: | --- |",
    ]
    for j in sorted(judged, key=lambda j: j.line):
        if not j.outcome:
            continue
        spec, d = j.spec, j.device
        method = spec["experiment"].split("_")[1]
        shape = f"{spec['modelMaxLength']} x {spec['batchSize']}"
        predicted = (
            f"| {d.tensor_bytes / GIB:.1f} | {d.total_bytes / GIB:.1f} ({d.percent:.0f}) | {d.dominant} "
            if d
            else f"| | no prediction: {j.reason} | "
        )
        verdict = "" if not d else ("fits" if d.fits else "OOM")
        lines.append(
            f"| {j.line} | {spec['model']}, {method} | {spec['fmsHfTuningVersion']} | {spec['numberGpus']} | {shape} "
            f"{predicted}| {_fmt(j.measured_percent)} | {j.outcome}, predicted {verdict} |"
        )
    return "\n".join(lines)


def min_gpus_table(judged: list[Judged]) -> str:
    """Issue 46.5: per group of rows with the same model, method, sequence length and (global) batch that ado
    ran at two or more GPU counts, the fewest GPUs ado's run fit on against the fewest the prediction says fit
    (each row predicted in its own release; the group spans releases and kernels, as ado's sweeps do)."""
    groups: dict[tuple[str, str, int, int], list[Judged]] = defaultdict(list)
    for j in judged:
        if j.outcome and j.device:
            s = j.spec
            groups[(s["model"], s["experiment"].split("_")[1], s["modelMaxLength"], s["batchSize"])].append(j)
    lines, agree, total = [], 0, 0
    for (model, method, seq, batch), members in sorted(groups.items()):
        counts = sorted({j.spec["numberGpus"] for j in members})
        ran = [j.spec["numberGpus"] for j in members if j.outcome == "ran"]
        if len(counts) < 2 or not ran:
            continue
        fits = [j.spec["numberGpus"] for j in members if j.device.fits]
        truth, predicted = min(ran), (min(fits) if fits else None)
        total += 1
        agree += predicted == truth
        shown = ", ".join(map(str, counts))
        fewest = "none" if predicted is None else str(predicted)
        lines.append(f"| {model}, {method} | {seq} x {batch} | {shown} | {truth} | {fewest} |")
    head = [
        f"Fewest GPUs: in {total} groups (same model, method, sequence and batch, run by ado at two or more GPU "
        f"counts) the fewest GPUs predicted to fit equals the fewest ado ran on in {agree} ({_pct(agree, total)}).",
        "",
        "| model, method | seq x batch | GPU counts ado tried | fewest that ran | fewest predicted to fit |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    return "\n".join(head + lines)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "no group"


def write_generated(marker: str, constants: dict[str, Any]) -> None:
    """Replace the section between `# {marker}:start` and `# {marker}:end` of ftbench/predict/constants.py."""
    start, end = f"# {marker}:start", f"# {marker}:end"
    text = CONSTANTS.read_text()
    head, rest = text.split(start, 1)
    first, rest = rest.split("\n", 1)
    _, tail = rest.split(end, 1)
    CONSTANTS.write_text(f"{head}{start}{first}\n{render_constants(constants)}\n{end}{tail}")
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(CONSTANTS)], check=True)  # as CI checks it


def render_constants(constants: dict[str, Any]) -> str:
    lines = []
    for name, value in constants.items():
        if isinstance(value, dict):
            lines.append(f"{name}: Final[dict[tuple[str, str], tuple[int, float, float]]] = {{")
            lines += [f'    ("{s}", "{k}"): ({n}, {m}, {q}),' for (s, k), (n, m, q) in value.items()]
            lines.append("}")
        else:
            lines.append(f"{name}: Final = {value!r}")
    return "\n".join(lines)


def bands_table(found: dict[str, Bands]) -> str:
    from ftbench.predict.constants import MIN_ROWS

    lines = [
        "How sure a prediction is: `ftbench predict` and `status.prediction.fit.fleetAccuracy` quote out-of-sample "
        f"errors: for a model the fleet has, its group's band under {GROUPED} (its scope's band over both kinds "
        f"where a group has fewer than {MIN_ROWS} rows); for a model it has not, its scope's band with the model "
        "left out of the fit. `ftbench/predict/constants.py` holds them, written by `tabulate --write-docs` from "
        "the same store.",
        "",
        "| validation | scope | model kind | rows that ran | median pp | p90 pp |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for label, name in ((GROUPED, "MEMORY_BANDS"), (MODEL_LEFT_OUT, "MEMORY_UNSEEN_MODEL_BANDS")):
        lines += [f"| {label} | {s} | {k} | {n} | {m:.1f} | {q:.1f} |" for (s, k), (n, m, q) in found[name].items()]
    return "\n".join(lines)


def repeatability(sample: Path) -> str:
    """ado's own spread: configurations it measured more than once, equal in every parameter it records, and
    equal but for gradient checkpointing's reentrancy and fast kernels (flags that leave the peak alone in most
    of the sample's pairs). No prediction can be closer to both runs of a pair than half their difference."""
    import itertools

    from ftbench.local.ado_rows import read_ado_csv

    rows = [ado.raw for ado in read_ado_csv(sample.read_text()) if ado.is_valid and clean(ado.spec)]
    lines = [
        "ado's own repeatability (no prediction can be nearer both runs of a pair than half their difference):",
        "",
        "| repeats: equal in | configurations | pairs | median difference pp | p90 pp | pairs over 8 pp |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, ignored in (("every parameter", ()), ("all but gc", ("gc",)), ("all but gc and fk", ("gc", "fk"))):
        groups: dict[tuple[str, ...], list[float]] = defaultdict(list)
        for r in rows:
            groups[tuple(r[c] for c in PARAMETERS if c not in ignored)].append(float(r["gpu_memory_utilization_peak"]))
        repeated = [v for v in groups.values() if len(v) > 1]
        pairs = [abs(a - b) for v in repeated for a, b in itertools.combinations(v, 2)]
        if not pairs:
            continue
        over = sum(d > 8 for d in pairs)
        lines.append(
            f"| {label} | {len(repeated)} | {len(pairs)} | {statistics.median(pairs):.1f} | {_fmt(_p90(pairs))} | "
            f"{over} ({_pct(over, len(pairs))}) |"
        )
    return "\n".join(lines)


def partner_table(judged: list[Judged]) -> str:
    """The rows that ran, by what the same configuration's other experiment did (`partners`), signed: a
    measurement that counts another process's memory reads above the run's own."""
    lines = [
        "The rows that ran, by what ado's other experiment on the same configuration did (full against LoRA, "
        "the adjacent line of ado's table; ado's figure is the whole GPU's NVML `used`, every process's):",
        "",
        "| the other experiment | rows that ran | median measured - predicted pp | rows over 8 pp | those rows (lines) |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    ran = [j for j in judged if j.outcome and j.device and j.measured_percent is not None]
    for label, partner in (("failed", "failed"), ("ran", "ran"), ("not on an adjacent line", None)):
        group = [j for j in ran if j.partner == partner]
        signed = [j.measured_percent - j.device.percent for j in group]
        over = sorted(j.line for j, e in zip(group, signed, strict=True) if abs(e) > 8)
        lines.append(
            f"| {label} | {len(group)} | {statistics.median(signed):+.1f} | {len(over)} | {', '.join(map(str, over))} |"
        )
    rest = sorted(abs(j.device.percent - j.measured_percent) for j in ran if j.partner != "failed")
    lines += [
        "",
        f"Without the rows whose other experiment failed: {len(rest)} rows, |predicted - measured| median "
        f"{statistics.median(rest):.1f}, 90th percentile {_fmt(_p90(rest))} percentage points, "
        f"{sum(e > 8 for e in rest)} rows over 8.",
    ]
    return "\n".join(lines)


def tabulate(store: Path, write_docs: bool) -> str:
    judged = judge(store)
    held = out_of_sample(judged)
    found = all_bands(held)
    body = (
        table(judged)
        + "\n\n"
        + validation_table(held)
        + "\n\n"
        + bands_table(found)
        + "\n\n"
        + model_left_out_table(held)
        + "\n\n"
        + repeatability(SAMPLE)
        + "\n\n"
        + partner_table(judged)
        + "\n\n"
        + min_gpus_table(judged)
        + "\n\n<details><summary>Every clear row</summary>\n\n"
        + rows_table(judged)
        + "\n\n</details>"
    )
    if write_docs:
        start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
        text = DOCS.read_text()
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        DOCS.write_text(f"{head}{start}\n{body}\n{end}{tail}")
        write_generated("memory-accuracy", found)
        write_generated("calibration-domain", calibration_domain(judged))
    return body


# -- fit --------------------------------------------------------------------------------------------------


def fit(store: Path) -> None:
    constants = fit_constants(judge(store))
    for name, value in sorted(vars(constants).items()):
        print(f"{name}: {value:.4f}")


# -- out of sample ----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("predict")
    p.add_argument("--sample", type=Path, default=SAMPLE)
    p.add_argument("--store", type=Path, default=STORE)
    p.add_argument("--only", type=int, help="at most this many rows per release (a quick look)")
    t = sub.add_parser("tabulate")
    t.add_argument("--store", type=Path, default=STORE)
    t.add_argument("--write-docs", action="store_true")
    f = sub.add_parser("fit")
    f.add_argument("--store", type=Path, default=STORE)
    args = parser.parse_args()
    if args.cmd == "predict":
        predict(args.sample, args.store, args.only)
    elif args.cmd == "tabulate":
        print(tabulate(args.store, args.write_docs))
    else:
        fit(args.store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
