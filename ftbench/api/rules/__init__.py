"""Cross-field rules of the spec, one module per family, with their CEL twins (`general` gathers them all)."""

from ftbench.api.rules.general import all_rules

__all__ = ["all_rules"]
