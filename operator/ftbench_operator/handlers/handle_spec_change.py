"""Spec edits after creation. Current clusters reject them (CEL `self == oldSelf` in the CRD);
older ones (< 1.25) store them, so the operator ignores them and says so in a condition: the
spec is the record of what was measured."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftbench.contracts.conditions import ConditionType
from ftbench_operator import status
from ftbench_operator.context import OperatorContext
from ftbench_operator.writer import Announce, write_status


async def spec_changed(ctx: OperatorContext, body: Mapping[str, Any]) -> None:
    async with ctx.fresh(body) as fresh:
        if fresh is None:
            return
        _, accepted_generation = fresh.accepted_spec()
        builder = status.StatusBuilder(fresh.status, fresh.generation, status.utcnow())
        desired = builder.spec_change_ignored(accepted_generation)
        ignored = status.condition(desired, ConditionType.SPEC_CHANGE_IGNORED) or {}
        announce = Announce(ConditionType.SPEC_CHANGE_IGNORED, str(ignored.get("message", "")), warning=True)
        await write_status(ctx, fresh, desired, announce)
