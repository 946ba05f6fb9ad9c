"""`python -m ftbench_trainer.predict --plan plan.json`: print one FTBENCH_PREDICTION line.

`--batch plans.jsonl` predicts one launch plan per line in one process (the traces they share are
made once) and prints one line per plan, in order: FTBENCH_PREDICTION, or FTBENCH_PREDICTION_ERROR
with the reason. A plan that cannot be predicted is one line saying why, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from functools import partial

from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import PREDICTION_ERROR_PREFIX
from ftbench_trainer.predict.model import PredictionError, predict

# A prediction reads config.json files and the catalog's architectures only: nothing may reach the hub.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def reason(exc: Exception) -> str:
    if isinstance(exc, PredictionError):
        return str(exc)
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"the prediction failed: {type(exc).__name__}: {first}".rstrip(": ")


def predict_one(load: Callable[[], LaunchPlan]) -> tuple[bool, str]:
    """(True, the prediction's line) or (False, the one-line reason it failed): a plan that cannot
    be read or parsed (OSError, ValueError) or predicted (PredictionError, which predict() raises for
    an architecture the tracer cannot run, whatever torch or transformers raised)."""
    try:
        return True, predict(load()).line()
    except (PredictionError, OSError, ValueError) as exc:
        return False, reason(exc)


def batch_line(line: str) -> str:
    """One plan of a batch answered: its prediction's line, or the line saying why it has none."""
    ok, text = predict_one(partial(LaunchPlan.from_json, line))
    return text if ok else f"{PREDICTION_ERROR_PREFIX} {json.dumps({'error': text})}"


def plan_answer(load: Callable[[], LaunchPlan]) -> tuple[str, str, int]:
    """One plan answered as this command answers it: (stdout, stderr, exit status)."""
    ok, text = predict_one(load)
    return (text + "\n", "", 0) if ok else ("", f"ftbench: {text}\n", 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftbench_trainer.predict", description=__doc__.split("\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--plan", help="launch plan JSON")
    which.add_argument("--batch", help="launch plans, one JSON per line")
    args = parser.parse_args(argv)
    os.environ.update(OFFLINE)
    if args.batch:
        with open(args.batch) as lines:
            for line in lines:  # one plan's failure is its line, the batch goes on
                print(batch_line(line), flush=True)
        return 0
    out, err, status = plan_answer(lambda: LaunchPlan.read(args.plan))
    sys.stdout.write(out)
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main())
