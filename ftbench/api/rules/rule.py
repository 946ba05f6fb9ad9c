"""One cross-field rule: a Python check and, where it can be said in CEL, its CEL twin.

Its own module so the rule families (`rules/*.py`) and the list that gathers them (`general.py`)
import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog, DatasetEntry

Check = Callable[[FineTuneExperimentSpec, Catalog], str | None]
DatasetCheck = Callable[[FineTuneExperimentSpec, DatasetEntry], str | None]


@dataclass(frozen=True)
class Rule:
    """A rule: `check` returns None when satisfied, else the problem and how to fix it."""

    id: str
    field: str  # camelCase path under spec, e.g. "batchSize"
    summary: str
    check: Check
    cel: str | None = None


class RuleFamily:
    """A family's rules in the order they are written: `@family.rule(id, field, summary[, cel])` states
    each rule on the check it runs (the check is named once, where it is defined)."""

    def __init__(self) -> None:
        self.rules: list[Rule] = []

    def rule(self, rule_id: str, field: str, summary: str, cel: str | None = None) -> Callable[[Check], Check]:
        def add(check: Check) -> Check:
            self.rules.append(Rule(rule_id, field, summary, check, cel))
            return check

        return add

    def dataset_rule(self, rule_id: str, field: str, summary: str) -> Callable[[DatasetCheck], DatasetCheck]:
        """A rule on the catalog's facts about the spec's dataset, checked with its `DatasetEntry`. It
        passes when the catalog does not know the dataset: catalog.dataset refuses that once, by name."""

        def add(check: DatasetCheck) -> DatasetCheck:
            def on_dataset(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
                dataset = c.datasets.get(s.dataset_id)
                return None if dataset is None else check(s, dataset)

            self.rules.append(Rule(rule_id, field, summary, on_dataset))
            return check

        return add


def cel_list(values: Sequence[str]) -> str:
    """A CEL list literal of strings (the CEL twins of membership checks)."""
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"
