"""``python -m ftbench_trainer.datasets generate ID -o PATH [--entries N] [--min-tokens N]``.

``-o`` names either a data directory (the file gets a content-keyed name there and an existing
one is reused) or a file ending in ``.jsonl``/``.parquet`` (always written, atomically). The
path of the dataset file is printed on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import DATASET_GENERATORS, EXTENSIONS, DatasetError, generate_dataset, write_dataset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftbench_trainer.datasets")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print the dataset ids and their generator parameters as JSON")
    gen = sub.add_parser("generate", help="generate one dataset")
    gen.add_argument("dataset_id", choices=sorted(DATASET_GENERATORS), metavar="DATASET_ID")
    gen.add_argument("-o", "--output", type=Path, required=True, help="data directory or output file")
    gen.add_argument("--entries", type=int, default=None, help="override the number of entries")
    gen.add_argument("--min-tokens", type=int, default=None, help="override the per-entry token minimum")
    gen.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    if args.command == "list":
        print(json.dumps(DATASET_GENERATORS, indent=2))
        return 0

    kwargs = {
        "entries": args.entries,
        "min_tokens": args.min_tokens,
        "seed": args.seed,
    }
    ext = EXTENSIONS[DATASET_GENERATORS[args.dataset_id]["kind"]]
    t0 = time.perf_counter()
    try:
        if args.output.suffix in (".jsonl", ".parquet"):
            if args.output.suffix != ext:
                parser.error(f"{args.dataset_id} is written as {ext}, not {args.output.suffix}")
            path = write_dataset(args.dataset_id, args.output, **kwargs)
        else:
            path = generate_dataset(args.dataset_id, args.output, **kwargs)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.dataset_id}: {path} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
