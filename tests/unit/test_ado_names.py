"""The ado property-name mapping covers ado's measured properties and ftbench's Metrics fields."""

from __future__ import annotations

from ftbench.contracts.ado_names import (
    ADO_COLUMNS,
    ADO_PARAMETERS,
    ADO_PROPERTIES,
    FTBENCH_EXTRAS,
    RUN_COLUMNS,
    ado_rows,
)
from ftbench.contracts.results import Metrics

# ado-sfttrainer 1.8.12 experiments/common.py get_default_measured_properties() (is_valid aside);
# tests/peer reads the same list from the installed package.
ADO_MEASURED = [
    "dataset_tokens_per_second_per_gpu", "train_runtime", "dataset_tokens_per_second", "train_samples_per_second",
    "train_steps_per_second", "train_tokens_per_second", "train_tokens_per_gpu_per_second",
    "cpu_compute_utilization", "cpu_memory_utilization", "gpu_compute_utilization_min",
    "gpu_compute_utilization_avg", "gpu_compute_utilization_max", "gpu_memory_utilization_min",
    "gpu_memory_utilization_avg", "gpu_memory_utilization_max", "gpu_memory_utilization_peak",
    "gpu_power_watts_min", "gpu_power_watts_avg", "gpu_power_watts_max", "gpu_power_percent_min",
    "gpu_power_percent_avg", "gpu_power_percent_max",
]  # fmt: skip


def test_every_ado_property_maps_to_a_metrics_field() -> None:
    assert list(ADO_PROPERTIES) == ADO_MEASURED
    assert set(ADO_PROPERTIES.values()) <= set(Metrics.model_fields)


def test_rows_use_ados_names_and_experiment_id() -> None:
    metrics = {"trainTokensPerSecond": 12.5, "gpuPowerMinWatts": 80.0, "cpuMemoryUtilizationPercent": 3.0,
               "nodeMemoryUsedPercent": 41.0, "noiseFlags": ["shortWindow", "hostContention"]}  # fmt: skip
    spec = {"model": "llama-7b", "numberGpus": 2, "batchSize": 4}
    rows = ado_rows("finetune_gtpq-lora_benchmark-v1.0.0", spec, [{"isValid": True, "metrics": metrics}, {}])
    assert [list(r) for r in rows] == [list(ADO_COLUMNS)] * 2
    first, second = rows
    assert first["experiment_id"] == "finetune_gptq-lora_benchmark-v1.0.0"
    assert (first["train_tokens_per_second"], first["gpu_power_watts_min"], first["cpu_memory_utilization"]) == (
        12.5, 80.0, 3.0,
    )  # fmt: skip
    assert first["ftbench_node_memory_used_percent"] == 41.0  # the node's figure, ado's quantity, beside it
    assert first["ftbench_noise_flags"] == "shortWindow;hostContention"  # a list metric is one cell
    assert first["ftbench_steady_state_tokens_per_second_ci95_low"] is None  # no interval recorded
    assert first["is_valid"] is True and second["is_valid"] is None and second["train_runtime"] is None
    assert first["model_name"] == "llama-7b" and set(ADO_PARAMETERS) < set(first)


def test_ftbench_extras_come_last_under_names_ado_does_not_use() -> None:
    """ado's columns keep their order; ftbench's extras follow, each a Metrics field named ftbench_*,
    then the run columns."""
    assert ADO_COLUMNS[: -len(FTBENCH_EXTRAS) - len(RUN_COLUMNS)] == (
        "experiment_id", *ADO_PARAMETERS, "is_valid", *ADO_PROPERTIES,
    )  # fmt: skip
    assert ADO_COLUMNS[-len(FTBENCH_EXTRAS) - len(RUN_COLUMNS) :] == (*FTBENCH_EXTRAS, *RUN_COLUMNS)
    assert all(name.startswith("ftbench_") and name not in ADO_MEASURED for name in RUN_COLUMNS)
    assert all(name.startswith("ftbench_") and name not in ADO_MEASURED for name in FTBENCH_EXTRAS)
    assert set(FTBENCH_EXTRAS.values()) <= set(Metrics.model_fields)
    assert FTBENCH_EXTRAS["ftbench_node_memory_used_percent"] == "node_memory_used_percent"


def test_rows_name_the_run_its_status_and_the_engine_that_ran() -> None:
    """A trl run used no fms-hf-tuning: its fms_hf_tuning_version is empty, whatever the spec's default;
    an fms-hf-tuning run names the release that ran; a run without results keeps its status."""
    spec = {"model": "m", "fmsHfTuningVersion": "3.1.0"}
    trl = {"isValid": True, "metrics": {"trainTokensPerSecond": 1.0}, "environment": {"engineVersion": "0.24.0"}}
    [row] = ado_rows("finetune_lora_benchmark-v1.0.0", spec, [trl], run_id="r1", status="Succeeded", engine="trl")
    assert row["fms_hf_tuning_version"] is None
    assert [row[c] for c in RUN_COLUMNS] == ["r1", "Succeeded", "trl", "0.24.0"]
    fms = {"isValid": True, "environment": {"engineVersion": "3.0.0"}}
    [row] = ado_rows("finetune_lora_benchmark-v1.0.0", spec, [fms], run_id="r2", status="Succeeded")
    assert row["fms_hf_tuning_version"] == "3.0.0" and row["ftbench_engine"] == "fms-hf-tuning"
    [row] = ado_rows("finetune_lora_benchmark-v1.0.0", spec, [], run_id="r3", status="Interrupted")
    assert (row["fms_hf_tuning_version"], row["ftbench_status"], row["is_valid"]) == ("3.1.0", "Interrupted", None)
