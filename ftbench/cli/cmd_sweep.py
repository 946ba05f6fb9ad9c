"""`ftbench sweep FILE`: run a FineTuneSweep on this machine, point by point, as the operator would.

The order, OOM pruning, repeats and reuse come from the same `plan_sweep` the operator calls;
only the runs differ (`ftbench run`'s local trainer, one at a time) and the observations come
from the local results store, so a sweep stopped with Ctrl-C (or killed) resumes with
`--resume` from what the store holds: finished runs are kept, an unfinished one runs again.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.resource import SWEEP_KIND
from ftbench.api.sweep import FineTuneSweepSpec, SweepPhase
from ftbench.catalog import Catalog
from ftbench.cli.cmd_validate import catalog_from_args, profile_from_arg
from ftbench.cli.documents import read_one_document
from ftbench.cli.local_options import add_local_run_options
from ftbench.cli.main import UsageError
from ftbench.cli.table import format_table
from ftbench.local.home import ftbench_home, local_profile, results_db
from ftbench.local.runner import LocalRunError, execute, prepare, trainer_profile, trainer_python
from ftbench.local.store import ResultsStore, SweepSlot
from ftbench.local.sweeps import LocalSweep, local_sweep
from ftbench.render.names import sweep_child_name
from ftbench.stats import text
from ftbench.sweep.cost import sweep_cost
from ftbench.sweep.points import parse_sweep_document
from ftbench.sweep.schedule import NewRun


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a FineTuneSweep on this machine and print its table")
    p.add_argument("file", metavar="FILE", help="a FineTuneSweep YAML file (- for stdin)")
    p.add_argument("--resume", action="store_true", help="continue a sweep of this name that the store holds")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_local_run_options(p)
    p.set_defaults(func=run)


def _load(args: argparse.Namespace) -> tuple[str, FineTuneSweepSpec]:
    parsed = parse_sweep_document(read_one_document(args.file, SWEEP_KIND))
    if parsed.issues or parsed.spec is None or parsed.name is None:
        raise UsageError(f"{args.file} is invalid:\n" + "\n".join(f"  - {issue}" for issue in parsed.issues))
    return parsed.name, parsed.spec


def _bar(state: LocalSweep, current: str) -> str:
    assert state.plan is not None
    done, total, width = state.plan.counts.finished, state.plan.counts.total, 30
    filled = int(width * done / total) if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} points  {current}"


def _show(text: str, tty: bool) -> None:
    sys.stderr.write(("\r\033[K" + text) if tty else text + "\n")
    sys.stderr.flush()


def _run_point(
    args: argparse.Namespace, name: str, new: NewRun, catalog: Catalog, profile: ClusterProfile, store: ResultsStore
) -> str:
    """One run of one point, recorded in the store with its slot; returns its status."""
    assert new.point.spec is not None
    spec, child = new.point.spec, sweep_child_name(name, new.point.index, new.repeat)
    home = ftbench_home()
    try:
        python = trainer_python(spec, args.python, log=lambda line: print(line, file=sys.stderr))
        local = prepare(
            spec, child, catalog, trainer_profile(profile, python), home, dataset_entries=args.dataset_entries
        )
    except LocalRunError as err:
        raise UsageError(f"point {new.point.index} ({new.point.describe()}): {err}") from err
    slot = SweepSlot(name, new.point.index, new.repeat)
    store.record(run_id=local.run_id, name=child, spec=spec, started_at=local.started_at, status="Running",
                 results=[], run_dir=local.run_dir, slot=slot)  # fmt: skip
    outcome = execute(
        local,
        python,
        on_output=(lambda line: print(line, file=sys.stderr)) if args.verbose else (lambda _: None),
    )
    store.record(run_id=local.run_id, name=child, spec=spec, started_at=local.started_at, status=outcome.status,
                 results=outcome.results, run_dir=local.run_dir, slot=slot)  # fmt: skip
    return outcome.status


def run(args: argparse.Namespace) -> int:
    name, spec = _load(args)
    home = ftbench_home()
    profile = local_profile(profile_from_arg(args.profile), home)
    catalog = catalog_from_args(args, catalog_for(profile))
    store = ResultsStore(results_db(home))
    stored = store.sweep(name)
    if stored is not None and not args.resume:
        raise UsageError(f"the results store already holds sweep {name!r}: pass --resume to continue it, "
                         "or give the sweep another metadata.name")  # fmt: skip
    if stored is not None and FineTuneSweepSpec.model_validate(stored.spec) != spec:
        raise UsageError(f"sweep {name!r} in the store has another spec: a sweep's spec is the record of what it "
                         "measures; give the changed sweep another metadata.name")  # fmt: skip
    state = local_sweep(store, name, spec, catalog)
    if state.plan is None:
        raise UsageError(f"{args.file} is invalid:\n" + "\n".join(f"  - {i}" for i in state.expansion.issues))
    store.save_sweep(name, spec.to_wire())
    print(f"sweep {name}: {sweep_cost(state.expansion.points, catalog).sentence()}", file=sys.stderr)
    tty = sys.stderr.isatty()
    while state.plan is not None and state.plan.to_create:
        new = state.plan.to_create[0]
        _show(_bar(state, f"running point {new.point.index} ({new.point.describe()}), repeat {new.repeat}"), tty)
        status = _run_point(args, name, new, catalog, profile, store)
        if status == "Interrupted":
            if tty:
                sys.stderr.write("\n")
            print(f"interrupted: point {new.point.index} did not finish; `ftbench sweep {args.file} --resume` "
                  "continues from the store", file=sys.stderr)  # fmt: skip
            return 130
        state = local_sweep(store, name, spec, catalog)
    assert state.plan is not None
    _show(_bar(state, "done"), tty)
    if tty:
        sys.stderr.write("\n")
    _print(state, args.output)
    return 0 if state.plan.phase == SweepPhase.SUCCEEDED else 1


def _cell(value: Any) -> str:
    return "" if value is None else f"{value:,.2f}" if isinstance(value, float) else str(value)


def _print(state: LocalSweep, fmt: str) -> None:
    assert state.plan is not None
    plan = state.plan
    if fmt == "json":
        print(json.dumps({"sweep": state.name, "phase": plan.phase.value, "message": plan.message,
                          "counts": plan.counts.to_wire(), "best": plan.best.to_wire() if plan.best else None,
                          "deviceHours": plan.device_hours.to_wire() if plan.device_hours else None,
                          "points": [row.to_wire() for row in plan.rows]}, indent=2))  # fmt: skip
        return
    varied = list(plan.rows[0].values) if plan.rows else []
    network = any(row.transport for row in plan.rows)  # the network preflight's columns, when a run had one
    header = ("POINT", *(k.upper() for k in varied), "PHASE", "TOKENS/S", "DATASET TOK/S", "PEAK MEM %", "MFU %",
              "STEP CV", *(("TRANSPORT", "PEAK BUSBW GB/S") if network else ()), "MESSAGE")  # fmt: skip
    rows = [
        (row.point, *(json.dumps(row.values.get(k)) for k in varied), row.phase.value,
         _cell(row.train_tokens_per_second), _cell(row.dataset_tokens_per_second),
         text.figure(row.gpu_memory_peak_percent, 2, measured=row.train_tokens_per_second is not None),
         text.figure(row.mfu_percent, 2, measured=row.train_tokens_per_second is not None),
         _cell(row.step_time_cv_across_repeats),
         *((row.transport or "", _cell(row.peak_bus_bandwidth_gbps)) if network else ()), row.message[:60])
        for row in plan.rows
    ]  # fmt: skip
    print(format_table(header, rows))
    if plan.device_hours is not None:
        print(plan.device_hours.summary())
    print(f"{plan.phase.value}: {plan.message}")
