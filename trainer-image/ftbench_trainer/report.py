"""Where results and progress go: result file, termination message, event file and stdout lines.

Progress lines (rank 0 only, at most one per `plan.output.progressIntervalSeconds`, plus the last
step) and the final result line go to stdout for people reading logs, and, when the plan names
one, to the event file `ftbench run` reads (ftbench.contracts.events: stdout is shared with the
libraries' own output, the event file is not). Their formats are defined in
ftbench.contracts.progress and ftbench.contracts.results.

`ProgressSink` is the hook for destinations: `StdoutProgressSink` writes the lines above, and
`TeeProgressSink` (what the worker uses) adds `status.progress` patches through
`ftbench_trainer.progress_reporter.ProgressReporter` when plan.output.reportProgressToKubernetes is set.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from ftbench.contracts.events import append_line
from ftbench.contracts.progress import ProgressUpdate, progress_line
from ftbench.contracts.results import TrainerResult

if TYPE_CHECKING:
    from ftbench_trainer.kubeflow_status import KubeflowStatusReporter
    from ftbench_trainer.progress_reporter import ProgressReporter

log = logging.getLogger(__name__)


class ProgressSink(Protocol):
    """Receives throttled progress from rank 0. Must be cheap and must not raise."""

    def update(self, progress: ProgressUpdate) -> None: ...


class StdoutProgressSink:
    """The progress line on stdout, and appended to the plan's event file when there is one."""

    def __init__(self, stream: TextIO | None = None, events_file: str | None = None) -> None:
        self.stream = stream
        self.events_file = events_file

    def update(self, progress: ProgressUpdate) -> None:
        _emit(progress_line(progress), self.stream, self.events_file)


def _emit(line: str, stream: TextIO | None, events_file: str | None) -> None:
    """One protocol line to stdout (logs) and to the event file (`ftbench run`); the file is the
    channel that counts, so a failure to write it is logged, never raised into training."""
    stream = stream or sys.stdout
    stream.write(line)
    stream.flush()
    if events_file:
        try:
            append_line(events_file, line)
        except OSError as exc:
            log.warning("event file %s not written: %s", events_file, exc)


class TeeProgressSink:
    """The log line for every update, ``status.progress`` patches when the plan asks for them, and
    Kubeflow Trainer's ``trainerStatus`` inside a TrainJob that offers its endpoint.

    ``reporter`` is ``ftbench_trainer.progress_reporter.ProgressReporter.from_plan(plan)`` (None when the
    plan does not report or the pod cannot reach the API). The callback already throttles to the
    plan's interval and always reports the last step, so that one is sent as ``final`` (never
    throttled by the reporter). ``kubeflow`` is
    ``ftbench_trainer.kubeflow_status.KubeflowStatusReporter.from_environ()``. ``close`` waits,
    bounded, for the last report of each to go out.
    """

    def __init__(
        self,
        reporter: ProgressReporter | None,
        stream: TextIO | None = None,
        events_file: str | None = None,
        *,
        kubeflow: KubeflowStatusReporter | None = None,
    ) -> None:
        self.stdout = StdoutProgressSink(stream, events_file)
        self.reporter = reporter
        self.kubeflow = kubeflow

    def update(self, progress: ProgressUpdate) -> None:
        self.stdout.update(progress)
        if self.reporter is not None:
            final = progress.total_steps > 0 and progress.step >= progress.total_steps
            self.reporter.report(
                progress.step, progress.total_steps, progress.tokens_per_second, progress.eta_seconds, final=final
            )
        if self.kubeflow is not None:
            self.kubeflow.update(progress)

    def close(self) -> None:
        for sender in (self.reporter, self.kubeflow):
            if sender is not None:
                sender.close()


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_result_file(result: TrainerResult, path: str | Path) -> Path:
    """The full result, pretty-printed, replaced atomically (readers never see half a file)."""
    path = Path(path)
    _atomic_write(path, result.model_dump_json(by_alias=True, exclude_none=True, indent=2) + "\n")
    return path


def write_termination_message(result: TrainerResult, path: str | Path) -> bool:
    """The compact result (<= 4096 bytes) to the container's termination message file.

    Best effort: outside a container the default /dev/termination-log may not be writable,
    and that must not turn a finished measurement into a failure.
    """
    try:
        Path(path).write_text(result.to_termination_message())
        return True
    except OSError as exc:
        log.info("termination message not written to %s: %s", path, exc)
        return False


def print_result(result: TrainerResult, stream: TextIO | None = None, events_file: str | None = None) -> None:
    _emit(result.to_line(), stream, events_file)
