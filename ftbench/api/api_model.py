"""The base of every API object (the CRDs' spec and status models, the cluster profile)."""

from __future__ import annotations

from ftbench.contracts.wire import WireModel


class ApiModel(WireModel):
    """Base for every API object: `WireModel`'s settings plus `to_wire`, the form Kubernetes stores."""

    def to_wire(self) -> dict:
        """The object as it appears in YAML / the Kubernetes API (camelCase, None omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
