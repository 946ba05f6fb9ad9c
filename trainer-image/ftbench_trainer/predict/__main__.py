"""`python -m ftbench_trainer.predict --plan plan.json`: print one FTBENCH_PREDICTION line."""

from __future__ import annotations

import argparse
import sys

from ftbench.contracts.plan import LaunchPlan
from ftbench_trainer.predict.model import PredictionError, predict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftbench_trainer.predict", description=__doc__.split("\n")[0])
    parser.add_argument("--plan", required=True, help="launch plan JSON")
    args = parser.parse_args(argv)
    try:
        prediction = predict(LaunchPlan.read(args.plan))
    except PredictionError as exc:
        print(f"ftbench: {exc}", file=sys.stderr)
        return 2
    print(prediction.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
