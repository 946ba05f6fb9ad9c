"""YAML read as the API server reads a manifest: a key written twice in one mapping is refused.

PyYAML keeps the last of two equal keys without a word, so `batchSize: 2` followed by `batchSize: 4`
would validate and run as 4 while the file says both; kubectl's strict field validation (the default
since Kubernetes 1.27) refuses such a manifest ("duplicate field"). ftbench's readers of user files
(experiments, sweeps, cluster profiles) load with `safe_load_all` here and say where the key repeats.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names one key twice."""


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise DuplicateKeyError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key].line + 1}); the API server refuses a field "
                    "written twice: keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def safe_load_all(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=_StrictLoader))


def safe_load(text: str) -> Any:
    return yaml.load(text, Loader=_StrictLoader)
