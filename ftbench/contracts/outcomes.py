"""What each trainer `Outcome` means to every reader: one table for the trainer, operator and CLI.

The trainer writes an outcome and a reason into its result and exits with a code; the operator
turns the outcome into a phase, a condition reason and `isValid`; `ftbench run` into its exit
status. Each of those used to keep its own mapping (and they could drift apart, e.g. a reason
spelt differently by the trainer and the operator), so they all read this table instead.

`Phase` lives here, not in `ftbench.api.status`, because the phase of a finished run is part of
this contract and the trainer image must be able to read it without the CRD's models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from ftbench.contracts.results import EXIT_FAILED, EXIT_GPU_OOM, EXIT_NETWORK_UNFIT, EXIT_OK, Outcome


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    INVALID = "Invalid"
    FAILED = "Failed"


@dataclass(frozen=True)
class OutcomeRule:
    """How one outcome reads: to the trainer, to the operator's status and to `ftbench run`."""

    phase: Phase  # status.phase of a run that ended so; also `ftbench run`'s status
    result_reason: str  # TrainerResult.reason the trainer writes
    status_reason: str  # the operator's condition and Event reason
    is_valid: bool | None  # seed 001's is_valid: GPU OOM is a valid "does not fit" measurement
    exit_code: int  # ftbench-trainer's exit code (a podFailurePolicy reads GPU OOM from it)
    default_message: str  # the status message when the result carries no error
    own_reason: bool = False  # the result may name a more precise reason (e.g. EngineMismatch)


OUTCOMES: Mapping[Outcome, OutcomeRule] = MappingProxyType(
    {
        Outcome.SUCCEEDED: OutcomeRule(
            Phase.SUCCEEDED, "Succeeded", "ResultsRecorded", True, EXIT_OK, "results recorded"
        ),
        Outcome.GPU_OOM: OutcomeRule(
            Phase.INVALID,
            "GpuOutOfMemory",
            "GpuOutOfMemory",
            False,
            EXIT_GPU_OOM,
            "the configuration does not fit in GPU memory",
        ),
        Outcome.NETWORK_UNFIT: OutcomeRule(
            Phase.INVALID,
            "RoceNotInEffect",
            "RoceNotInEffect",
            False,
            EXIT_NETWORK_UNFIT,
            "spec.run.requireRoce: the network preflight did not show NCCL on RoCE, so nothing was trained",
        ),
        Outcome.FAILED: OutcomeRule(
            Phase.FAILED, "TrainingError", "TrainingError", None, EXIT_FAILED, "training failed", own_reason=True
        ),
    }
)
# The phases of a run that has ended: exactly those an outcome leads to.
FINISHED: frozenset[Phase] = frozenset(rule.phase for rule in OUTCOMES.values())


def status_reason(outcome: Outcome, result_reason: str = "") -> str:
    """The operator's reason for a run that ended with `outcome` and the trainer's `result_reason`."""
    rule = OUTCOMES[outcome]
    return (result_reason or rule.status_reason) if rule.own_reason else rule.status_reason
