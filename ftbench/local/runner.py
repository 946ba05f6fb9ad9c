"""`ftbench run`: the operator's plan, executed by the trainer as a local subprocess.

The same `build_plan` the operator uses makes the plan; only the cluster profile differs (storage
under FTBENCH_HOME). Progress and result lines (ftbench.contracts.progress, ftbench.contracts.results)
come through the run's event file (ftbench.contracts.events), never through the trainer's stdout:
that stream is shared with the libraries' own output (tqdm's carriage returns would glue a
progress line into a bar). The stdout and stderr go to the run's log, so this module needs no torch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ftbench.api import effective
from ftbench.api.profile import ClusterProfile
from ftbench.api.repeats import combined_result, precise_repeats
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import Engine, Runtime
from ftbench.contracts.events import EventTail
from ftbench.contracts.outcomes import OUTCOMES, Phase
from ftbench.contracts.plan import ExperimentRef, LaunchPlan
from ftbench.contracts.progress import parse_progress_line
from ftbench.contracts.results import TrainerResult
from ftbench.extras import MissingExtra, require
from ftbench.host.gpus import local_gpu_count
from ftbench.host.ports import free_port
from ftbench.host.procs import stop_process_group
from ftbench.render.plan import PlanError, build_plan

TRAINER_MODULE = "ftbench_trainer.main"
INTERRUPT_GRACE_SECONDS = 30.0
# A terminal's progress bar wants more than the cluster's one report per 10 s; a report is one
# line appended to a file, so once a second costs nothing measurable.
LOCAL_PROGRESS_INTERVAL_SECONDS = 1.0
# How often the event file is read while the trainer runs.
EVENT_POLL_SECONDS = 0.2


class LocalRunError(Exception):
    """The experiment cannot run on this machine; the message says why and what to do."""


@dataclass
class LocalRun:
    run_id: str
    name: str
    spec: FineTuneExperimentSpec
    plan: LaunchPlan
    run_dir: Path
    plan_path: Path
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    repeated: bool = False  # spec.repeats > 1: the repeats' outcomes decide the run's (api.repeats)

    @property
    def log_path(self) -> Path:
        return self.run_dir / "trainer.log"

    @property
    def events_path(self) -> Path:
        return self.run_dir / "events.log"


@dataclass
class RunOutcome:
    status: str  # Succeeded | Invalid | Failed | Interrupted
    results: list[TrainerResult]
    returncode: int


def prepare(
    spec: FineTuneExperimentSpec,
    name: str,
    catalog: Catalog,
    profile: ClusterProfile,
    home: Path,
    *,
    dataset_entries: int | None = None,
    gpus_available: int | None = None,
    any_fms_release: bool = False,
) -> LocalRun:
    if spec.number_nodes != 1:
        raise LocalRunError(
            f"numberNodes is {spec.number_nodes}: multi-node runs need a cluster (ftbench render, or the operator); "
            "set numberNodes to 1 to run here"
        )
    gpus = local_gpu_count() if gpus_available is None else gpus_available
    if effective.gpus_per_node(spec) > gpus:
        raise LocalRunError(
            f"numberGpus is {spec.number_gpus} but this machine has {gpus} usable GPU(s); "
            f"set numberGpus to at most {gpus} (0 runs on CPU), or device cpu to run {spec.number_gpus} CPU ranks"
        )
    # Ranks meet on a port free now, not the profile's fixed one: local runs may run side by side.
    profile = profile.model_copy(update={"master_port": free_port()})
    run_id = f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    run_dir = home / "runs" / run_id
    try:
        plan = build_plan(
            spec,
            catalog,
            profile,
            ref=ExperimentRef(name=name, namespace="local"),
            runtime=Runtime.JOB,
            output_dir=str(run_dir / "output"),
            dataset_entries=dataset_entries,
        )
    except PlanError as err:  # what the operator would call Invalid: here, a usage error with the reason
        raise LocalRunError(str(err)) from err
    output = {
        "termination_message_path": str(run_dir / "termination-log"),
        "events_file": str(run_dir / "events.log"),
        "progress_interval_seconds": LOCAL_PROGRESS_INTERVAL_SECONDS,
    }
    plan = plan.model_copy(
        update={"output": plan.output.model_copy(update=output), "allow_engine_mismatch": any_fms_release}
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    plan_path = run_dir / "plan.json"
    plan_path.write_text(plan.to_json())
    (run_dir / "spec.json").write_text(json.dumps(spec.to_wire(), indent=2))
    return LocalRun(
        run_id=run_id,
        name=name,
        spec=spec,
        plan=plan,
        run_dir=run_dir,
        plan_path=plan_path,
        repeated=effective.is_repeated(spec, catalog),
    )


@dataclass(frozen=True)
class TrainerPython:
    """The interpreter that runs ftbench-trainer, and what it needs on PYTHONPATH."""

    path: str
    pythonpath: str | None = None

    def environment(self, **extra: str) -> dict[str, str]:
        """This process's environment for the interpreter, with ftbench's packages on PYTHONPATH.

        An engine's environment (the one case with a PYTHONPATH of ftbench's own) writes bytecode, as
        Python does by default: with PYTHONDONTWRITEBYTECODE set, each process compiled its ~3,400
        imported modules again (13 of a cold `ftbench predict`'s 25 s; docs/benchmarks.md, "Predict latency")."""
        env = {**os.environ, **extra}
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (self.pythonpath, env.get("PYTHONPATH")) if p)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env


def trainer_python(
    spec: FineTuneExperimentSpec, explicit: str | None = None, log: Callable[[str], None] = lambda _: None
) -> TrainerPython:
    """The interpreter that has the engine installed.

    trl runs in this environment. Each fms-hf-tuning release pins an older stack of its own and
    runs in its own environment, built from its lock on first use and cached (ftbench.engines.envs);
    ftbench's packages reach it through PYTHONPATH. --python PATH overrides either.
    """
    from ftbench.engines.envs import ensure_env, package_path

    if spec.engine == Engine.TRL:
        if explicit:
            return TrainerPython(explicit)
        try:  # trl trains in this environment: without the trainer extra it would die on its first import
            require("trainer", "engine trl (it trains in this environment)")
        except MissingExtra as err:
            raise LocalRunError(f"{err}, or pass --python PATH (an interpreter that has it)") from err
        return TrainerPython(sys.executable)
    try:
        pythonpath = package_path()
        if explicit:
            return TrainerPython(explicit, pythonpath)
        return TrainerPython(str(ensure_env(spec.fms_hf_tuning_version, log=log)), pythonpath)
    except (RuntimeError, OSError, KeyError) as err:
        raise LocalRunError(
            f"no environment for fms-hf-tuning {spec.fms_hf_tuning_version}: {err}\n"
            "pass --python PATH (an interpreter with that release installed) or set engine: trl"
        ) from err


def trainer_profile(profile: ClusterProfile, python: TrainerPython) -> ClusterProfile:
    """The profile as the interpreter that trains here has it. A profile describes a cluster's images,
    which carry flash-attn (flashAttention true); this machine's trainer may not (a laptop, a lent GPU
    machine), and attentionImplementation auto then resolves to sdpa, as on images built without it,
    instead of the run dying on transformers' import of flash_attn."""
    if not profile.flash_attention or has_module(python, "flash_attn"):
        return profile
    return profile.model_copy(update={"flash_attention": False})


def has_module(python: TrainerPython, module: str) -> bool:
    """Whether `module` imports in the trainer's interpreter (found, not imported: nothing runs)."""
    if python.path == sys.executable and not python.pythonpath:
        import importlib.util

        return importlib.util.find_spec(module) is not None
    env = python.environment()
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        return subprocess.run([python.path, "-c", probe], env=env, capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def execute(
    run: LocalRun,
    python: TrainerPython,
    *,
    on_progress: Callable[[dict[str, Any]], None] = lambda _: None,
    on_output: Callable[[str], None] = lambda _: None,
) -> RunOutcome:
    """Run the trainer, follow its event file, and stop it cleanly on Ctrl-C (exit status 'Interrupted').

    Several trials (the stability experiment's, or spec.repeats) run one after another, each in a
    fresh trainer process (`--trial N`), as the cluster runs each in its own pod.
    `on_progress` gets each progress line's JSON while the trainer runs; `on_output` each line of
    the trainer's own output (which also goes to the run's log).
    """
    env = python.environment(TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    base = [python.path, "-m", TRAINER_MODULE, "--plan", str(run.plan_path)]
    trials = [None] if run.plan.trials <= 1 else list(range(run.plan.trials))
    events = EventTail(run.events_path)
    results: list[TrainerResult] = []

    def read_events() -> None:
        for line in events.new_lines():
            if (progress := parse_progress_line(line)) is not None:
                on_progress(progress)
            elif (result := TrainerResult.from_line(line)) is not None:
                results.append(result)

    returncode: int | None = 0
    with run.log_path.open("w") as log:
        for trial in trials:
            command = base if trial is None else [*base, "--trial", str(trial)]
            # A new session: Ctrl-C reaches us only, and we forward one SIGINT to the whole trainer group
            # (accelerate and its ranks) so it stops between steps instead of dying mid-write.
            proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
            )
            assert proc.stdout is not None
            drain = threading.Thread(target=_copy_output, args=(proc.stdout, log, on_output), daemon=True)
            drain.start()
            try:
                while (returncode := _wait(proc, EVENT_POLL_SECONDS)) is None:
                    read_events()
                drain.join()
                read_events()
            except KeyboardInterrupt:
                _stop(proc)
                return RunOutcome("Interrupted", results, 130)
            if run.repeated and precise_repeats(results, run.plan.stop.target_precision):
                break  # the interval across the repeats so far is as tight as asked (api.repeats)
    return RunOutcome(_status(results, run.repeated), results, returncode or 0)


def _wait(proc: subprocess.Popen, seconds: float) -> int | None:
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def _copy_output(lines: Iterable[str], log: Any, on_output: Callable[[str], None]) -> None:
    """The trainer's stdout and stderr into the run's log (a thread, so a chatty library never
    blocks the trainer on a full pipe while the main thread follows the event file)."""
    for line in lines:
        log.write(line)
        on_output(line.rstrip("\n"))
    log.flush()


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT first: the trainer stops between steps and accelerate tears its ranks down."""
    stop_process_group(proc, ((signal.SIGINT, INTERRUPT_GRACE_SECONDS), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)))


def _status(results: list[TrainerResult], repeated: bool = False) -> str:
    """The phase the operator would give the run (the outcome table), so `ftbench run` and the
    cluster agree. Several results are stability trials, whose OOMs and errors are themselves the
    measurement, or repeats, whose worst outcome is the run's (api.repeats).
    """
    if not results:
        return Phase.FAILED.value
    if repeated:
        return OUTCOMES[combined_result(results).outcome].phase.value
    if len(results) > 1:
        return Phase.SUCCEEDED.value
    return OUTCOMES[results[0].outcome].phase.value
