"""The chart's `clusterProfile` value, checked by `helm install` with the profile's own schema.

values.schema.json is written by hand except this part, which comes from `ClusterProfile` (one
source: the operator validates the same model at start-up, `ftbench validate --profile` too), so
a profile Helm accepts is one the operator starts with, bar the checks a JSON schema cannot state
(two volumes at one path, a cache on a read-only volume, a tag template per release): those stop
the operator at start-up with the field named. `python -m ftbench.api.chart_schema --write`
(run by hack/generate.sh) refreshes it; a test keeps it fresh.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ftbench.api.profile import ClusterProfile

VALUES_SCHEMA = Path(__file__).resolve().parents[2] / "helm" / "ftbench" / "values.schema.json"
PREFIX = "profile."
DESCRIPTION = (
    "ftbench.api.profile.ClusterProfile (camelCase keys), generated from the model (python -m "
    "ftbench.api.chart_schema --write); the operator checks the rest at start-up. See "
    "docs/reference/cluster-profile.md."
)


def _tidy(node: Any) -> Any:
    """pydantic's schema made strict for Helm: no titles; a map's key pattern (patternProperties,
    which leaves other keys unchecked) as propertyNames with the value schema for every key."""
    if isinstance(node, list):
        return [_tidy(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _tidy(v) for k, v in node.items() if k != "title"}
    patterns = node.pop("patternProperties", None)
    if patterns:
        ((pattern, value),) = patterns.items()
        node["propertyNames"] = {**node.get("propertyNames", {}), "pattern": pattern}
        node["additionalProperties"] = value
    return node


def profile_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the clusterProfile property's schema, the definitions it refers to)."""
    schema = ClusterProfile.model_json_schema(by_alias=True, ref_template="#/definitions/" + PREFIX + "{model}")
    definitions = {PREFIX + name: _tidy(d) for name, d in schema.pop("$defs", {}).items()}
    return {**_tidy(schema), "description": DESCRIPTION}, definitions


def values_schema(current: dict[str, Any]) -> dict[str, Any]:
    """The chart's values schema with its clusterProfile part regenerated."""
    prop, definitions = profile_schema()
    kept = {k: v for k, v in current.get("definitions", {}).items() if not k.startswith(PREFIX)}
    properties = {**current["properties"], "clusterProfile": prop}
    return {**current, "definitions": {**kept, **definitions}, "properties": properties}


def render(current: dict[str, Any]) -> str:
    return json.dumps(values_schema(current), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {VALUES_SCHEMA}")
    args = parser.parse_args(argv)
    text = render(json.loads(VALUES_SCHEMA.read_text()))
    if args.write:
        VALUES_SCHEMA.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
