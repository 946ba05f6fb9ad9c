"""`ftbench-trainer --plan PATH [--trial N]`: run one measurement described by a launch plan.

Exit codes (ftbench.contracts.results): 0 success, 42 GPU out of memory (a valid "does not fit"
measurement), 1 any other failure, 2 unreadable plan. Trials (ftbench.contracts.env): `--trial N`
or FTBENCH_TRIAL_INDEX runs that one trial; unset with plan.trials > 1 runs every trial in
sequence. With FTBENCH_TRIAL_FAILURE_EXIT_ZERO=true (stability pods) or several trials in one
process, an OOM or error is a measurement: reported, exit 0. Whatever happens, the node writes the
result JSON (plan.output.resultFile), the compact result to the termination message path, and a
``FTBENCH_RESULT`` line on stdout and to plan.output.eventsFile when set (see ftbench_trainer.report).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from ftbench.contracts import env
from ftbench.contracts.enums import Engine
from ftbench.contracts.plan import PLAN_FILENAME, PLAN_MOUNT_DIR, LaunchPlan
from ftbench.contracts.results import EXIT_INVALID_PLAN, EXIT_OK, TrainerResult
from ftbench_trainer.report import print_result, write_result_file, write_termination_message

log = logging.getLogger("ftbench_trainer")


def result_path(plan: LaunchPlan, trial: int | None) -> Path:
    """plan.output.resultFile; stability trials get `<stem>.trial-N<suffix>` so none overwrites another."""
    path = Path(plan.output.result_file)
    if trial is None or plan.trials <= 1:
        return path
    return path.with_name(f"{path.stem}.trial-{trial}{path.suffix}")


def prepare_environment(plan: LaunchPlan) -> None:
    """Env the ML libraries read at import time; set before any of them is imported."""
    if plan.hf_home and env.HF_HOME not in os.environ and Path(plan.hf_home).is_dir():
        os.environ[env.HF_HOME] = plan.hf_home
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if plan.use_cpu and plan.training.deepspeed is not None:  # DeepSpeed's CPU accelerator: gloo, no CUDA ops
        os.environ.setdefault(env.DS_ACCELERATOR, "cpu")
    # fms-hf-tuning's multi-process runs crash on a rank that finds no output_dir (CPU notes).
    Path(plan.output.dir).mkdir(parents=True, exist_ok=True)


def run(plan: LaunchPlan, plan_path: str, trial: int | None) -> TrainerResult:
    if plan.engine == Engine.FMS_HF_TUNING:  # before any process starts: the wrong release measures nothing
        from ftbench_trainer.engines.fms import check_release

        check_release(plan)
    prepare_environment(plan)
    if plan.launcher == "accelerate":
        from ftbench_trainer.launch import run_accelerate

        return run_accelerate(plan, plan_path, trial)
    from ftbench_trainer.worker import run_worker

    return run_worker(plan, trial=trial)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ftbench-trainer", description=__doc__.split("\n")[0])
    parser.add_argument("--plan", default=str(Path(PLAN_MOUNT_DIR) / PLAN_FILENAME), help="launch plan JSON")
    parser.add_argument("--trial", type=int, default=None, help="stability trial index (labels the result)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        plan = LaunchPlan.read(args.plan)
    except (OSError, ValueError) as exc:  # unreadable, not JSON or not a plan (ValidationError): nothing to measure
        log.error("cannot read plan %s: %s", args.plan, exc)
        return EXIT_INVALID_PLAN
    from ftbench_trainer.measure.system import gpu_memory_total_bytes
    from ftbench_trainer.predict.of_run import RunPrediction
    from ftbench_trainer.worker import EXIT_CODES, failure_result

    trial = args.trial if args.trial is not None else env.trial_index(os.environ)
    trials: list[int | None] = [trial] if trial is not None or plan.trials <= 1 else list(range(plan.trials))
    prediction = RunPrediction(plan, None if plan.use_cpu else gpu_memory_total_bytes())
    for t in trials:
        try:
            result = prediction.beside(run(plan, args.plan, t))
        except Exception as exc:  # launch-level failure (rendezvous env, accelerate missing, ...)
            log.exception("launch failed")
            result = failure_result(exc, trial=t)
        write_result_file(result, result_path(plan, t))
        write_termination_message(result, plan.output.termination_message_path)
        print_result(result, events_file=plan.output.events_file)
    if len(trials) > 1 or env.trial_failure_exit_zero(os.environ):
        return EXIT_OK
    return EXIT_CODES[result.outcome]


if __name__ == "__main__":
    sys.exit(main())
