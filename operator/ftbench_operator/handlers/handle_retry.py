"""Retry: the `ftbench.io/retry` annotation re-runs a failed experiment as attempt N + 1.

A retry runs the accepted spec (`status.acceptedSpec`, recorded when the spec first passed
validation, even if that attempt failed before it started), never an edit made since: the status
message and the SpecChangeIgnored condition say which generation runs. The status is reset to the new attempt *before* the old children are deleted, so the deletion
events of attempt N are not mistaken for a child deleted by hand. The annotation is removed
when the retry is done (or refused), which makes it a one-shot request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from ftbench.api.status import Phase
from ftbench.contracts.labels import RETRY_ANNOTATION
from ftbench_operator import children, status
from ftbench_operator.body import ExperimentView
from ftbench_operator.context import OperatorContext, event
from ftbench_operator.handlers.handle_start import start_attempt
from ftbench_operator.reasons import GPU_OOM
from ftbench_operator.writer import Announce, write_status


def retryable(experiment: ExperimentView) -> bool:
    """Failed runs, and GPU OOM runs (the cluster or images may have changed); not invalid specs."""
    if experiment.phase == Phase.FAILED:
        return True
    return experiment.phase == Phase.INVALID and experiment.invalid_reason.startswith(GPU_OOM)


async def retry(ctx: OperatorContext, body: Mapping[str, Any], patch: kopf.Patch) -> None:
    async with ctx.fresh(body) as fresh:
        if fresh is None:
            return
        patch.metadata.annotations[RETRY_ANNOTATION] = None
        if not retryable(fresh):
            phase = None if fresh.phase is None else fresh.phase.value
            event(
                fresh,
                "RetryIgnored",
                f"retry only re-runs Failed or GPU-OOM experiments; phase is {phase}",
                warning=True,
            )
            return
        attempt = fresh.attempt + 1
        _, accepted_generation = fresh.accepted_spec()
        builder = status.StatusBuilder(fresh.status, fresh.generation, status.utcnow())
        retrying = Announce("Retrying", f"attempt {attempt} replaces attempt {attempt - 1}", when="never")
        await write_status(ctx, fresh, builder.retrying(attempt, accepted_generation), retrying)
        await children.delete_owned(ctx.kube, fresh.body, children.attempt_selector(fresh.name, other_than=attempt))
        event(fresh, retrying.reason, retrying.message)  # once the old attempt's children are going
        refreshed = await ctx.kube.get_experiment(fresh.namespace, fresh.name)
        if refreshed is not None:
            await start_attempt(ctx, ExperimentView.parse(refreshed), attempt)
