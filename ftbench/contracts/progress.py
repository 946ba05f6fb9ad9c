"""Live training progress: the stdout line rank 0 prints and the `status.progress` it patches.

Three processes read progress, so its shapes are defined here once: the **progress line**
(`ProgressUpdate`: a fixed prefix then compact JSON on stdout, at most once per
`plan.output.progressIntervalSeconds` plus the last step) and **`status.progress`** (`Progress`:
what `ftbench_trainer.progress_reporter` patches into the FineTuneExperiment, as the CRD declares it).

The result line that ends a run (`FTBENCH_RESULT`) belongs to the result: ftbench.contracts.results.
Imports pydantic and the standard library only: the trainer image loads this without kopf.

Design notes: docs/design-notes.md, "ftbench/contracts/progress.py".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

PROGRESS_PREFIX = "FTBENCH_PROGRESS"
# What ProgressUpdate.peak_memory_bytes measures.
MEMORY_GPU_ALLOCATED = "gpuMaxMemoryAllocated"
MEMORY_CPU_RSS = "cpuPeakRss"


@dataclass(frozen=True)
class ProgressUpdate:
    """What rank 0 measured at one step: the payload of a progress line.

    - ``step``: optimizer steps finished; ``total_steps``: the Trainer's planned total (max_steps,
      or epochs x steps per epoch; a clock-based stop may end the run earlier).
    - ``tokens_per_second``: padded tokens so far / elapsed, estimated as rank 0's count x world
      size (the exact all-rank count is only exchanged once, at the end).
    - ``eta_seconds``: elapsed / step x remaining steps; None before the first step.
    - ``loss``: the last training loss the Trainer logged (None before its first log).
    - ``step_time_seconds``: elapsed / steps, warm-up included (the result's step times are the
      steady window's).
    - ``peak_memory_bytes``: rank 0's peak so far, of ``memory_kind``: MEMORY_GPU_ALLOCATED
      (torch.cuda.max_memory_allocated) or MEMORY_CPU_RSS (the process's peak resident set).
    - ``steady_ci95_relative``: the half-width / estimate of this rank's steady-state tokens/s 95 %
      interval so far (batch means; within this run only); None before 4 steady steps.
    """

    step: int
    total_steps: int
    elapsed_seconds: float
    tokens_per_second: float
    eta_seconds: float | None = None
    loss: float | None = None
    step_time_seconds: float | None = None
    peak_memory_bytes: int | None = None
    memory_kind: str = ""
    steady_ci95_relative: float | None = None

    def to_dict(self) -> dict[str, float | int | str]:
        """The line's JSON object (camelCase, like the status; a value not known yet is left out)."""
        out: dict[str, float | int | str] = {
            "step": self.step,
            "totalSteps": self.total_steps,
            "elapsedSeconds": round(self.elapsed_seconds, 3),
            "tokensPerSecond": round(self.tokens_per_second, 3),
        }
        optional = {
            "etaSeconds": self.eta_seconds,
            "loss": self.loss,
            "stepTimeSeconds": self.step_time_seconds,
            "steadyCi95Relative": self.steady_ci95_relative,
        }
        digits = {"loss": 6, "steadyCi95Relative": 4}
        out |= {k: round(v, digits.get(k, 3)) for k, v in optional.items() if v is not None}
        if self.peak_memory_bytes is not None:
            out |= {"peakMemoryBytes": self.peak_memory_bytes, "memoryKind": self.memory_kind}
        return out


def progress_line(update: ProgressUpdate) -> str:
    """The stdout line for `update`, newline included: the prefix, one space, compact JSON."""
    return f"{PROGRESS_PREFIX} {json.dumps(update.to_dict(), separators=(',', ':'))}\n"


def parse_progress_line(line: str) -> dict[str, float | int | str] | None:
    """The JSON of a progress line, or None for any other line (for log readers and tests)."""
    if not line.startswith(PROGRESS_PREFIX + " "):
        return None
    return json.loads(line[len(PROGRESS_PREFIX) + 1 :])


class Progress(BaseModel):
    """Live progress from rank 0 (at most every 10 s)."""

    # ftbench.api.api_model.ApiModel's settings; not that class itself, which would make this module
    # import ftbench.api, whose status imports this one.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    step: Annotated[int, Field(ge=0)] = Field(0, description="Optimizer steps done.")
    total_steps: Annotated[int, Field(ge=0)] = Field(0, description="Steps planned (0 when unknown).")
    percent: Annotated[float, Field(ge=0, le=100)] = Field(0.0, description="step / totalSteps in %.")
    tokens_per_second: Annotated[float, Field(ge=0)] = Field(
        0.0, description="Training tokens/s so far, all ranks (estimated from rank 0 x world size while running)."
    )
    eta_seconds: Annotated[float, Field(ge=0)] | None = Field(None, description="Estimated seconds left.")
    trial: Annotated[int, Field(ge=0)] | None = Field(None, description="Stability trial in progress.")
    last_update_time: datetime | None = Field(None, description="When rank 0 last reported.")

    @classmethod
    def reported(
        cls, step: int, total: int, tokens_per_second: float, eta: float | None, trial: int | None, now: datetime
    ) -> Progress:
        """What rank 0 reports at `now`: values clamped into the schema's bounds (a report must never
        be rejected for a stray negative), rounded, and the time to whole seconds in UTC."""
        step, total = max(0, int(step)), max(0, int(total))
        return cls(
            step=step,
            total_steps=total,
            percent=round(min(100.0, 100.0 * step / total), 2) if total else 0.0,
            tokens_per_second=round(max(0.0, float(tokens_per_second)), 3),
            eta_seconds=None if eta is None else round(max(0.0, float(eta)), 1),
            trial=trial,
            last_update_time=now.astimezone(UTC).replace(microsecond=0),
        )

    def to_wire(self) -> dict[str, Any]:
        """The object as `status.progress` holds it (camelCase, None omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
