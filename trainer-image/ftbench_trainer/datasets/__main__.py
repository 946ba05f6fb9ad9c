"""``python -m ftbench_trainer.datasets generate ID --generator JSON -o PATH [--entries N] [--min-tokens N]``.

The generator parameters come from the caller (`ftbench dataset generate` reads them from the catalog,
a run from its plan): the trainer reads no catalog. ``-o`` names either a data directory (the file gets
a content-keyed name there and an existing one is reused) or a file ending in ``.jsonl``/``.parquet``
(always written, atomically). The path of the dataset file is printed on stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ftbench.contracts.plan import DatasetGenerator

from . import EXTENSIONS, DatasetError, generate_dataset, write_dataset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftbench_trainer.datasets")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate one dataset")
    gen.add_argument("dataset_id", metavar="DATASET_ID")
    gen.add_argument("--generator", required=True, help="its generator parameters as JSON (DatasetGenerator)")
    gen.add_argument("-o", "--output", type=Path, required=True, help="data directory or output file")
    gen.add_argument("--entries", type=int, default=None, help="override the number of entries")
    gen.add_argument("--min-tokens", type=int, default=None, help="override the per-entry token minimum")
    gen.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        generator = DatasetGenerator.model_validate_json(args.generator)
    except ValueError as err:  # pydantic's ValidationError: the first problem, in one line
        print(
            f"error: --generator is not a dataset generator: {str(err).splitlines()[:3][-1].strip()}", file=sys.stderr
        )
        return 2
    kwargs = {"entries": args.entries, "min_tokens": args.min_tokens, "seed": args.seed}
    ext = EXTENSIONS[generator.kind]
    t0 = time.perf_counter()
    try:
        if args.output.suffix in (".jsonl", ".parquet"):
            if args.output.suffix != ext:
                print(f"error: {args.dataset_id} is written as {ext}, not {args.output.suffix}", file=sys.stderr)
                return 2
            path = write_dataset(args.dataset_id, generator, args.output, **kwargs)
        else:
            path = generate_dataset(args.dataset_id, generator, args.output, **kwargs)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.dataset_id}: {path} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
