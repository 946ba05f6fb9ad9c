"""FSDP1, FSDP2 and gradient accumulation on CPU ranks: what a rank really holds against what ftbench predicts.

Not a test: run it by hand; it writes bench/results/fsdp-accumulation.json, and `--write-docs` puts the
table in docs/benchmarks.md (tests/unit/test_bench_tables.py keeps the two the same)::

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python bench/fsdp_accumulation.py --write-docs

Why: ado's fleet (fms-hf-tuning: accelerate's FSDP1, gradient accumulation 4) is predicted with FSDP1
arithmetic on a single-rank trace, and its 2-GPU full fine-tuning rows are over-predicted by about the
size of the gradient shard while 16-GPU rows are exact. Here the same arithmetic is held against real
FSDP1 steps where the tracker counts every storage (trl's Trainer, accelerate, FULL_SHARD, float32): a
4-layer Llama wide enough (69 MB of parameters, 512 tokens) that the gradients are not lost under the
activations, on 2 and 4 ranks, with gradient accumulation 1 and 4. The Trainer runs the first micro-steps
of an accumulation under FSDP's `no_sync`, which keeps each unit's whole unsharded gradient until the
last micro-step: the measured GA 4 - GA 1 difference says whether that happened (it is the whole
model's gradient, whatever the ranks) and the predicted difference is what the arithmetic assumes (the
sharded gradients). FSDP2 (trl's default) is traced on fake ranks instead; accelerate 1.11 on runs its
accumulated micro-steps without reducing too (`set_requires_gradient_sync(False)`), which the trace follows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainer_run import run_trainer

from ftbench.contracts.results import TrainerResult

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "fsdp-accumulation.json"
DOCS = REPO / "docs" / "benchmarks.md"
SECTION = "fsdp-accumulation"
MODEL = "llama3.2-1b"  # the catalog name the wide model is mapped to (its architecture is replaced below)
WIDE = {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 8, "head_dim": 64}  # fmt: skip
BASE: dict[str, Any] = {
    "experiment": "finetune_full_benchmark-v1.0.0",
    "engine": "trl",
    "model": MODEL,
    "datasetId": "news-chars-512-entries-4096",
    "modelMaxLength": 512,
    "device": "cpu",
    "distributedBackend": "FSDP",
    "fsdpVersion": 1,
    "batchSize": 4,
    "maxSteps": 2,
    "torchDtype": "float32",
}
VARIANTS = [(version, ranks, ga) for version in (1, 2) for ranks in (2, 4) for ga in (1, 4)]


def wide_model(root: Path) -> Path:
    """The tiny Llama's tokenizer with wider, deeper layers (random weights)."""
    import transformers

    from ftbench_trainer.tiny_model import build_tiny_model

    tiny = build_tiny_model(root / "tiny")
    out = root / "wide"
    shutil.copytree(tiny, out)
    for weights in out.glob("*.safetensors"):
        weights.unlink()
    fields = {**json.loads((out / "config.json").read_text()), **WIDE}
    transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**fields)).save_pretrained(out)
    return out


def row(version: int, ranks: int, ga: int, result: TrainerResult) -> dict[str, Any]:
    m = result.metrics
    assert m is not None and m.predicted_peak_bytes and m.cpu_tensor_peak_bytes
    return {
        "fsdpVersion": version,
        "ranks": ranks,
        "gradientAccumulationSteps": ga,
        "measuredPeakBytes": m.cpu_tensor_peak_bytes,
        "predictedPeakBytes": m.predicted_peak_bytes,
        "errorPercent": m.prediction_error_percent,
        "parameterBytes": m.model_parameter_bytes,
        "gradientBytesPerRank": m.rank_memory[0].gradient_bytes,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """One line per FSDP version and rank count: both accumulations' peaks, and the difference against the
    gradients' sizes."""
    lines = [
        "| FSDP | ranks | GA 1: measured / predicted MB (error) | GA 4: measured / predicted MB (error) "
        "| GA 4 - GA 1 measured MB | predicted MB | whole model's gradient MB | sharded gradient MB |",
        "| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    mb = 1e6
    for version, ranks in sorted({(r["fsdpVersion"], r["ranks"]) for r in rows}):
        one, four = (
            next(
                r for r in rows if (r["fsdpVersion"], r["ranks"], r["gradientAccumulationSteps"]) == (version, ranks, g)
            )
            for g in (1, 4)
        )
        cells = [
            f"{r['measuredPeakBytes'] / mb:.0f} / {r['predictedPeakBytes'] / mb:.0f} ({r['errorPercent']:+.1f} %)"
            for r in (one, four)
        ]
        lines.append(
            f"| {version} | {ranks} | {cells[0]} | {cells[1]} "
            f"| {(four['measuredPeakBytes'] - one['measuredPeakBytes']) / mb:.0f} "
            f"| {(four['predictedPeakBytes'] - one['predictedPeakBytes']) / mb:.0f} "
            f"| {one['parameterBytes'] / mb:.0f} | {one['gradientBytesPerRank'] / mb:.0f} |"
        )
    return "\n".join(lines)


def write_docs(body: str) -> None:
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    text = DOCS.read_text()
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    DOCS.write_text(f"{head}{start}\n{body}\n{end}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--tabulate", action="store_true", help="only tabulate the stored results")
    args = parser.parse_args()
    if not args.tabulate:
        root = Path(tempfile.mkdtemp(prefix="ftbench-fsdp1-ga-"))
        data = root / "data"
        data.mkdir()
        mapped = {"modelMap": {MODEL: {"Vanilla": str(wide_model(root))}}}
        rows = []
        for version, ranks, ga in VARIANTS:
            fields = {**BASE, "fsdpVersion": version, "numberGpus": ranks, "gradientAccumulationSteps": ga}
            result = run_trainer(root, f"v{version}-r{ranks}-ga{ga}", fields, data, profile=mapped)
            rows.append(row(version, ranks, ga, result))
        RESULTS.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    body = table(json.loads(RESULTS.read_text())["rows"])
    print(body)
    if args.write_docs:
        write_docs(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
