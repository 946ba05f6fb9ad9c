"""The same work as 1 rank, 2-rank DDP and 2-rank FSDP, side by side in one run, on CPU ranks.

Not a test: run it by hand and copy the table into docs/benchmarks.md::

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python bench/fsdp_cpu.py --steps 40 --rounds 2

Each variant is `ftbench-trainer` in a fresh process (as a pod runs it) on the tiny Llama with the
same global batch, steps, data and seed; the variants are interleaved in rounds (A B C, C B A, ...)
so drift in the machine's speed hits them alike. Throughput is the trainer's own
`trainTokensPerSecond` (exact token counts over the measured window); the ratios are each variant's
median over rounds divided by the 1-rank median. Memory is what each rank held, read from the
running model and optimizer (`results.rankMemory`): the FSDP/DDP ratio of parameter and
optimizer-state bytes per rank is the sharding, and does not depend on the machine's load.
On CPU these are CPU figures: gloo collectives and one thread per rank, nothing about GPUs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainer_run import run_trainer

from ftbench.contracts.results import TrainerResult

BASE: dict[str, Any] = {
    "experiment": "finetune_full_benchmark-v1.0.0",
    "engine": "trl",
    "model": "ftbench-tiny-llama",
    "datasetId": "news-chars-512-entries-4096",
    "modelMaxLength": 512,
    "device": "cpu",
    "batchSize": 4,
    "gradientAccumulationSteps": 1,
    "gradientCheckpointing": False,
    "torchDtype": "float32",
}
VARIANTS: dict[str, dict[str, Any]] = {
    "1 rank": {"numberGpus": 1},
    "2-rank DDP": {"numberGpus": 2, "distributedBackend": "DDP"},
    "2-rank FSDP": {"numberGpus": 2, "distributedBackend": "FSDP"},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ftbench-fsdp-bench-"))
    data = root / "data"
    data.mkdir()
    results: dict[str, list[TrainerResult]] = {name: [] for name in VARIANTS}
    for r in range(args.rounds):
        order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            fields = {**BASE, "maxSteps": args.steps, **VARIANTS[name]}
            results[name].append(run_trainer(root, name, fields, data))
    base = statistics.median(x.metrics.train_tokens_per_second for x in results["1 rank"] if x.metrics)
    ddp0 = results["2-rank DDP"][0].metrics
    assert ddp0 is not None
    rows = []
    for name, runs in results.items():
        tps = [x.metrics.train_tokens_per_second for x in runs if x.metrics]
        m = runs[0].metrics
        assert m is not None
        rank0 = m.rank_memory[0]
        rows.append(
            {
                "variant": name,
                "tokensPerSecond": statistics.median(tps),
                "rounds": [round(t, 1) for t in tps],
                "throughputVs1Rank": statistics.median(tps) / base,
                "paramBytesPerRank": rank0.parameter_bytes,
                "paramBytesVsDdp": rank0.parameter_bytes / ddp0.rank_memory[0].parameter_bytes,
                "optimizerBytesPerRank": rank0.optimizer_state_bytes,
                "optimizerBytesVsDdp": rank0.optimizer_state_bytes / ddp0.rank_memory[0].optimizer_state_bytes,
                "fsdp": (
                    runs[0].environment.fsdp.sharding_strategy
                    if runs[0].environment and runs[0].environment.fsdp
                    else ""
                ),
            }
        )
    print(
        "| variant | tokens/s (median; rounds) | vs 1 rank | param bytes / rank | vs DDP | optimizer bytes / rank | vs DDP |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['variant']} | {row['tokensPerSecond']:,.0f} ({', '.join(f'{t:,.0f}' for t in row['rounds'])}) "
            f"| {row['throughputVs1Rank']:.2f} | {row['paramBytesPerRank']:,} | {row['paramBytesVsDdp']:.3f} "
            f"| {row['optimizerBytesPerRank']:,} | {row['optimizerBytesVsDdp']:.3f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
