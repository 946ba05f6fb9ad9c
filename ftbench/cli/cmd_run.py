"""`ftbench run FILE`: validate, plan as the operator would, train locally, show and store results."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from ftbench.api.effective import describe_batch
from ftbench.api.network import describe
from ftbench.api.profile import catalog_for
from ftbench.api.repeats import combined_result, repeats_status
from ftbench.api.resource import KIND
from ftbench.api.stability import aggregate_trials, trial_outcome
from ftbench.catalog import Catalog
from ftbench.cli.cmd_validate import profile_from_arg, spec_from_body
from ftbench.cli.documents import read_one_document
from ftbench.cli.local_options import add_local_run_options
from ftbench.cli.main import UsageError
from ftbench.cli.table import format_table
from ftbench.contracts.network import NetworkInEffect
from ftbench.contracts.results import Metrics, TrainerResult
from ftbench.local.home import ftbench_home, local_profile, results_db
from ftbench.local.runner import LocalRun, LocalRunError, RunOutcome, execute, prepare, trainer_profile, trainer_python
from ftbench.local.store import ResultsStore
from ftbench.stats import text
from ftbench.stats.device_time import DeviceTime, device_time
from ftbench.stats.results import metric_interval


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an experiment on this machine and print what it measured")
    p.add_argument("file", metavar="FILE", help="a FineTuneExperiment YAML file (- for stdin)")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    add_local_run_options(p)
    p.add_argument(
        "--any-fms-release",
        action="store_true",
        help="with --python: run the fms-hf-tuning release installed there even if the spec asks for another "
        "(the results name the release that ran)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no summary, progress or next steps on stderr: only the results on stdout (for scripts)",
    )
    p.set_defaults(func=run)


def _progress_printer(tty: bool):
    def show(progress: dict[str, Any]) -> None:
        step, total = progress.get("step", 0), progress.get("totalSteps", 0)
        width = 30
        done = int(width * step / total) if total else 0
        eta = progress.get("etaSeconds")
        text = (
            f"[{'#' * done}{'.' * (width - done)}] step {step}/{total or '?'}  "
            f"{progress.get('tokensPerSecond', 0.0):,.0f} tokens/s  ETA {'?' if eta is None else f'{eta:.0f}s'}"
        )
        sys.stderr.write(("\r" + text) if tty else text + "\n")
        sys.stderr.flush()

    return show


HEADLINE = (
    ("trainTokensPerSecond", "train tokens/s (padded, all ranks)"),
    ("trainTokensPerGpuPerSecond", "train tokens/s per GPU"),
    ("datasetTokensPerSecond", "dataset tokens/s"),
    ("trainSamplesPerSecond", "samples/s"),
    ("trainStepsPerSecond", "steps/s"),
    ("trainRuntimeSeconds", "runtime (s)"),
    ("trainSteps", "steps"),
    ("trainTokens", "tokens (padded)"),
    ("stepTimeP50Seconds", "step time p50 (s)"),
    ("stepTimeP95Seconds", "step time p95 (s)"),
    ("mfuPercent", "MFU %"),
    ("gpuMemoryUtilizationPeakPercent", "GPU memory peak %"),
    ("gpuComputeUtilizationAvgPercent", "GPU compute avg %"),
    ("cpuComputeUtilizationPercent", "CPU %"),
    ("stoppedBy", "stopped by"),
)


def results_table(outcome: RunOutcome, repeated: bool = False, planned: int = 0, target: float | None = None) -> str:
    """The run's table; with `repeated`, each repeat first (`planned` of them, `target`: the precision
    that may stop them early)."""
    if len(outcome.results) > 1 and not repeated:
        stability = aggregate_trials(
            [trial_outcome(r.trial if r.trial is not None else i, r) for i, r in enumerate(outcome.results)],
            planned=len(outcome.results),
        )
        trial_rows = [(t.index, t.outcome.value, t.reason, t.message[:60]) for t in stability.trials]
        summary = (
            f"f_no_error={stability.f_no_error:.2f}  f_gpu_oom={stability.f_gpu_oom:.2f}  "
            f"f_other_error={stability.f_other_error:.2f}"
        )
        return format_table(("TRIAL", "OUTCOME", "REASON", "MESSAGE"), trial_rows) + "\n" + summary
    result = combined_result(outcome.results) if repeated else outcome.results[0]
    rows: list[tuple[str, object]] = [("outcome", result.outcome.value), ("is_valid", result.is_valid)]
    if result.error:
        rows.append(("error", f"{result.error.type}: {result.error.message[:200]}"))
    if result.metrics:
        metrics = result.metrics.model_dump(by_alias=True)
        rows += [(label, _with_interval(result.metrics, key, metrics[key])) for key, label in HEADLINE]
        rows += [
            ("steady tokens/s (after warmup)", text.steady_throughput(result.metrics)),
            ("measured", f"{result.metrics.measured_steps} steps, {result.metrics.measured_seconds:.1f} s "
                         f"after {result.metrics.warmup_steps} warmup steps"),
            ("noise", text.noise(result.metrics)),
            ("data", text.rows_sentence(result.metrics)),
            ("device time", device_time_text(device_time(result.metrics, runs=len(outcome.results)))),
        ]  # fmt: skip
    if result.environment:
        env = result.environment
        rows += [("distributed mode", env.distributed_mode), ("world size", env.world_size), ("device", env.device)]
    table = format_table(("PROPERTY", "VALUE"), rows)
    if result.environment and result.environment.network:
        table += "\n\n" + network_table(result.environment.network)
    return repeats_table(outcome.results, planned, target) + "\n" + table if repeated else table


def device_time_text(split: DeviceTime) -> str:
    """Device-seconds spent and where they went (the estimate of a precision stop's saving says so)."""
    line = (
        f"{split.total:,.1f} device-s (set-up {split.setup:,.1f}, warm-up {split.warmup:,.1f}, "
        f"measured {split.measured:,.1f})"
    )
    if split.saved_estimate is not None:
        line += f"; ~{split.saved_estimate:,.1f} saved by the precision target (estimate)"
    return line


def network_table(network: NetworkInEffect) -> str:
    """The network preflight: what ran over what, then algbw and busbw per collective and size (docs/roce.md)."""
    rows = [
        (s.collective.value, f"{s.size_bytes:,}", f"{s.seconds * 1e3:.3f}", f"{s.alg_bandwidth_gbps:g}",
         f"{s.bus_bandwidth_gbps:g}")
        for s in network.bandwidth
    ]  # fmt: skip
    head = f"network preflight: {describe(network)}"
    return head + "\n" + format_table(("COLLECTIVE", "SIZE (B)", "TIME (ms)", "ALGBW GB/s", "BUSBW GB/s"), rows)


def repeats_table(results: list[TrainerResult], planned: int = 0, target: float | None = None) -> str:
    """Each repeat's outcome and steady throughput, then the mean, interval and CV across them."""
    rows = [
        (i, r.outcome.value, text.steady_throughput(r.metrics) if r.metrics else "", text.flag_names(r.metrics))
        for i, r in enumerate(results)
    ]
    across = repeats_status(max(planned, len(results)), results, target)
    line = "across repeats: no successful repeat"
    if across.mean is not None:
        line = f"across repeats: mean {across.mean:,.0f} tokens/s"
        if across.ci95_low is not None and across.ci95_high is not None and across.cv is not None:
            line += f" (95% CI {across.ci95_low:,.0f}-{across.ci95_high:,.0f}, CV {across.cv:.1%})"
    if across.stopped_by:
        line += f"; {across.finished} of {across.planned} repeats ran: the interval across them reached the target"
    return format_table(("REPEAT", "OUTCOME", "STEADY TOKENS/S", "NOISE"), rows) + "\n" + line + "\n"


def _fmt(value: object) -> str:
    if value is None:
        return text.NOT_APPLICABLE  # a figure of this result that does not apply to the run
    return f"{value:,.3f}" if isinstance(value, float) else str(value)


def _with_interval(metrics: Metrics, key: str, value: object) -> str:
    """A rate or MFU with its 95 % half-width (`metric_interval`: the run's own, or across repeats)."""
    interval = metric_interval([metrics], key) if isinstance(value, float) and value else None
    return _fmt(value) if interval is None else f"{_fmt(value)} ±{interval.relative_half_width:.1%}"


def load_spec(args: argparse.Namespace, base: Catalog):
    return spec_from_body(args, read_one_document(args.file, KIND), base)


def run(args: argparse.Namespace) -> int:
    home = ftbench_home()
    profile = local_profile(profile_from_arg(args.profile), home)
    spec, name, catalog = load_spec(args, catalog_for(profile))
    try:
        python = trainer_python(spec, args.python, log=lambda line: print(line, file=sys.stderr))
        local = prepare(
            spec,
            name,
            catalog,
            trainer_profile(profile, python),
            home,
            dataset_entries=args.dataset_entries,
            any_fms_release=args.any_fms_release,
        )
    except LocalRunError as err:
        raise UsageError(str(err)) from err
    store = ResultsStore(results_db(home))
    store.record(run_id=local.run_id, name=name, spec=spec, started_at=local.started_at, status="Running",
                 results=[], run_dir=local.run_dir)  # fmt: skip
    say = (lambda _: None) if args.quiet else (lambda line: print(line, file=sys.stderr))
    for note in local.plan.notes:
        say(f"note: {note}")
    for line in summary(local):
        say(line)
    tty = sys.stderr.isatty()
    outcome = execute(
        local,
        python,
        on_progress=(lambda _: None) if args.quiet else _progress_printer(tty),
        on_output=(lambda line: print(line, file=sys.stderr)) if args.verbose else (lambda _: None),
    )
    if tty and not args.quiet:
        sys.stderr.write("\n")
    store.record(run_id=local.run_id, name=name, spec=spec, started_at=local.started_at, status=outcome.status,
                 results=outcome.results, run_dir=local.run_dir)  # fmt: skip
    status = _report(local, outcome, args.output)
    if outcome.results and outcome.status != "Interrupted":
        for line in next_steps(local):
            say(line)
    return status


def summary(local: LocalRun) -> list[str]:
    """What is about to run, as accepted: the lines `ftbench run` starts with on stderr."""
    spec, plan = local.spec, local.plan
    engine = spec.engine.value + (f" {plan.engine_version}" if plan.engine_version else "")
    topology = plan.topology
    device = f"{spec.number_gpus} GPU(s)" if spec.number_gpus else "CPU"
    steps = f"{plan.training.max_steps} steps" if plan.training.max_steps > 0 else f"{spec.num_train_epochs} epoch(s)"
    trials = (
        f", {plan.trials} {'repeats' if local.repeated else 'trials'} (each in a fresh process)"
        if plan.trials > 1
        else ""
    )
    return [
        f"run {local.run_id}: {local.name} ({spec.experiment.value})",
        f"  model {spec.model}, engine {engine}, {topology.world_size} rank(s) on {device}, {steps}{trials}",
        f"  batch: {describe_batch(spec)}",
        f"  logs: {local.log_path}",
    ]


def next_steps(local: LocalRun) -> list[str]:
    """The commands to try after a run: its results among the others, a comparison, a report."""
    return [
        "next:",
        "  ftbench results                          # every local run",
        f"  ftbench results compare RUN {local.run_id}   # this run against another (RUN: an id from ftbench results)",
        "  ftbench report -o report/                # report.md and report.html with plots",
    ]


def _report(local: LocalRun, outcome: RunOutcome, fmt: str) -> int:
    if outcome.status == "Interrupted":
        print(f"interrupted: the trainer was stopped; partial logs in {local.log_path}", file=sys.stderr)
        return 130
    if not outcome.results:
        print(f"failed: the trainer exited with code {outcome.returncode} without a result; see {local.log_path}",
              file=sys.stderr)  # fmt: skip
        return 1
    payload = [json.loads(r.to_json()) for r in outcome.results]
    if fmt == "json":
        print(json.dumps(payload if len(payload) > 1 else payload[0], indent=2))
    elif fmt == "yaml":
        print(yaml.safe_dump(payload if len(payload) > 1 else payload[0], sort_keys=False), end="")
    else:
        print(results_table(outcome, local.repeated, local.plan.trials, local.plan.stop.target_precision))
    # run_dir is <home>/runs/<id>.
    print(f"{outcome.status}: run {local.run_id} stored in {results_db(local.run_dir.parent.parent)}",
          file=sys.stderr)  # fmt: skip
    return 0 if outcome.status in ("Succeeded", "Invalid") else 1
