"""The one way an experiment's status is written: diff, patch onto this incarnation, log, Event.

Every handler that changes an experiment's status (start, follow, retry, spec change) goes through
`write_status`, so each write is a merge patch of only what changed (`status.diff`), lands only on
the object the handler acted on (by uid: a namesake created meanwhile is not ours to write), and is
announced the same way: an Event when asked (`announce`), a log line always.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ftbench_operator import status
from ftbench_operator.body import ExperimentView
from ftbench_operator.context import OperatorContext, event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Announce:
    """The Event of a write: `when` "always" (whenever something was written), "phase" (only when
    the phase changed) or "never"."""

    reason: str
    message: str
    warning: bool = False
    when: Literal["always", "phase", "never"] = "always"


async def write_status(
    ctx: OperatorContext, experiment: ExperimentView, desired: Mapping[str, Any], announce: Announce
) -> bool:
    """Write what differs between `desired` and the stored status; False when nothing was written
    (no change, or the experiment is gone)."""
    patch = status.diff(experiment.status, desired)
    if not patch:
        return False
    written = await ctx.kube.patch_experiment_status(experiment.namespace, experiment.name, patch, uid=experiment.uid)
    if written is None:
        return False
    log.info("%s/%s: %s %s", experiment.namespace, experiment.name, announce.reason, announce.message)
    if announce.when == "always" or (announce.when == "phase" and patch.get("phase")):
        event(experiment, announce.reason, announce.message, warning=announce.warning)
    return True
