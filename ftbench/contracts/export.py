"""What `ftbench results --export json` writes, and the JSON Schemas other tools read results with.

The export and the trainer's result cross into tools that do not read Python (dashboards, notebooks,
ado analyses), so each has a versioned JSON Schema generated from its model and published under
docs/reference/schemas/ (`ftbench docs`): the trainer's result (`schemaVersion`
ftbench.io/result/v1), its metrics (the FineTuneExperiment's status.results) and one exported run
(`schemaVersion` ftbench.io/export/v1). A test validates real exports against them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ftbench.contracts.results import RESULT_SCHEMA_VERSION, Metrics, TrainerResult

ExportVersion = Literal["ftbench.io/export/v1"]
EXPORT_SCHEMA_VERSION: ExportVersion = "ftbench.io/export/v1"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE = "https://ftbench.io/schemas/"

# Columns of `ftbench results` and of the CSV export, in order (the JSON export adds the rest).
EXPORT_COLUMNS = (
    "id",
    "name",
    "started_at",
    "finished_at",
    "experiment",
    "engine",
    "model",
    "number_gpus",
    "batch_size",
    "model_max_length",
    "status",
    "is_valid",
    "train_tokens_per_second",
)


class ExportedRun(BaseModel):
    """One run of `ftbench results --export json` (a JSON list of these). snake_case, as the CSV's columns."""

    model_config = ConfigDict(extra="forbid")

    schema_version: ExportVersion = Field(EXPORT_SCHEMA_VERSION, description="Export schema version.")
    id: str = Field(description="The run's id in the results store (`ftbench results compare ID`).")
    name: str = Field(description="The experiment's metadata.name.")
    started_at: str = Field(description="ISO 8601 time the run started.")
    finished_at: str | None = Field(description="ISO 8601 time it ended; null while it runs.")
    experiment: str = Field(description="spec.experiment.")
    engine: str = Field(description="spec.engine.")
    model: str = Field(description="spec.model.")
    number_gpus: int = Field(description="spec.numberGpus (CPU ranks with device cpu).")
    batch_size: int = Field(description="spec.batchSize.")
    model_max_length: int = Field(description="spec.modelMaxLength.")
    status: str = Field(description="The run's phase: Succeeded, Failed, Invalid, ...")
    is_valid: bool | None = Field(description="Seed 001's is_valid: true Succeeded, false GpuOom, null otherwise.")
    train_tokens_per_second: float | None = Field(description="Mean trainTokensPerSecond over its trials or repeats.")
    sweep: str | None = Field(None, description="The `ftbench sweep` it belongs to (with point and repeat).")
    point: int | None = None
    repeat: int | None = None
    spec: dict[str, Any] = Field(description="The FineTuneExperiment spec run (camelCase, docs/reference/crd.md).")
    results: list[TrainerResult] = Field(description="Each trial's or repeat's result (result.v1.schema.json).")


def _schema(model: type[BaseModel], name: str, title: str) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="serialization")
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_BASE + name, **schema, "title": title}


def json_schemas() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema, for docs/reference/schemas/."""
    version = RESULT_SCHEMA_VERSION.rsplit("/", 1)[-1]
    export = _schema(ExportedRun, f"export.{version}.schema.json", "One run of ftbench results --export json")
    export_list = {  # its references are "#/$defs/...": the definitions stay at the root
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_BASE + f"export-list.{version}.schema.json",
        "title": "ftbench results --export json",
        "type": "array",
        "items": {k: v for k, v in export.items() if k not in ("$schema", "$id", "$defs")},
        "$defs": export.get("$defs", {}),
    }
    return {
        f"result.{version}.schema.json": _schema(TrainerResult, f"result.{version}.schema.json", "A trainer result"),
        f"metrics.{version}.schema.json": _schema(
            Metrics, f"metrics.{version}.schema.json", "Measured properties (status.results)"
        ),
        f"export-list.{version}.schema.json": export_list,
    }
