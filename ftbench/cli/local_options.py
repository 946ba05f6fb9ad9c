"""The options of the commands that train on this machine: `ftbench run` and `ftbench sweep`.

Both prepare runs with `ftbench.local.runner` from a cluster profile, start ftbench-trainer with an
interpreter and can shrink the dataset for a smoke run; the options are written here once so the
two commands cannot drift apart.
"""

from __future__ import annotations

import argparse

from ftbench.cli.cmd_validate import add_model_map


def add_local_run_options(p: argparse.ArgumentParser) -> None:
    """`--profile`, `--model-map`, `--python`, `--dataset-entries` and `-v/--verbose`."""
    p.add_argument("--profile", metavar="FILE", help="cluster profile (storage paths, model map)")
    add_model_map(p)
    p.add_argument("--python", metavar="PATH", help="interpreter that runs ftbench-trainer (default: per engine)")
    p.add_argument("--dataset-entries", type=int, metavar="N", help="generate only N dataset entries (smoke runs)")
    p.add_argument("-v", "--verbose", action="store_true", help="show the trainer's own output")
