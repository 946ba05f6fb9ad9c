"""Catalogs of models, datasets and experiments: YAML data shipped in the package, overridable.

One source: the CLI tables, the validation rules, the plan and the docs all read these files.
"""

from ftbench.catalog.loader import (
    Catalog,
    DatasetEntry,
    ExperimentEntry,
    ModelEntry,
    ModelWeights,
    load_catalog,
    load_model_map,
)

__all__ = [
    "Catalog",
    "DatasetEntry",
    "ExperimentEntry",
    "ModelEntry",
    "ModelWeights",
    "load_catalog",
    "load_model_map",
]
