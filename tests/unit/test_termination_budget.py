"""The termination message's byte budget (Kubernetes keeps 4096 bytes of it): the fullest result fits.

A result travels from the trainer pod to the operator in the container's termination message. When it
is too long, `TrainerResult.to_termination_message` drops, in order, the loss curve and all but two
ranks' shard sizes, the network bandwidth per size, the Kubeflow report's error text and the bare
command (the result file keeps them all). Every metric must survive: a new field in `Metrics` or
`RunEnvironment` spends this budget, and this test fails when the fullest result (a real two-rank run's
environment, every metric set to a value of its widest realistic form) no longer fits with every
metric in it. docs/architecture.md, "Where a new X goes", says so.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

from ftbench.contracts.results import TERMINATION_MESSAGE_LIMIT, Metrics, TrainerResult

REAL = Path(__file__).parent / "data" / "fms-fsdp-cpu-result.json"  # ftbench run of an fms-hf-tuning FSDP spec


def widest(name: str, field: typing.Any, real: object) -> object:
    """A value of the field's type as wide as a real run writes it (17 significant digits for a float)."""
    text = repr(field.annotation)
    bounded = any(getattr(m, "le", None) == 100 for m in field.metadata) or "Percent" in text
    if "float" in text and "list" not in text:
        return 99.12345678901234 if bounded else 123456.78901234567
    if "int" in text and "list" not in text and "bool" not in text:
        return 123456789012
    return real


def fullest_result() -> TrainerResult:
    result = TrainerResult.model_validate(json.loads(REAL.read_text()))
    assert result.metrics is not None
    real = result.metrics.model_dump(by_alias=True)
    filled = {
        field.alias or name: widest(name, field, real[field.alias or name])
        for name, field in Metrics.model_fields.items()
    }
    filled["peakBatchShape"] = [128, 131072]
    return result.model_copy(update={"metrics": Metrics.model_validate(filled)})


def test_the_fullest_result_fits_the_termination_message_with_every_metric():
    result = fullest_result()
    message = result.to_termination_message()
    size = len(message.encode())
    assert size <= TERMINATION_MESSAGE_LIMIT
    kept = TrainerResult.from_json(message).metrics
    assert kept is not None
    dropped = {"lossCurve", "rankMemory"}  # the lists go first; every other metric must be whole
    full = {k: v for k, v in result.metrics.model_dump(by_alias=True).items() if k not in dropped}  # type: ignore[union-attr]
    assert {k: v for k, v in kept.model_dump(by_alias=True).items() if k not in dropped} == full, (
        f"a metric was cut to fit {TERMINATION_MESSAGE_LIMIT} bytes ({size} used)"
    )
