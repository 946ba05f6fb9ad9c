"""ado's names for ftbench's results, so analyses written against ado's SFTTrainer actuator
(ado-sfttrainer 1.8.12, `experiments/common.py::get_default_measured_properties`) read ftbench runs.

One mapping, used by `ftbench results --export csv|json --names ado` and rendered into
docs/reference/crd.md. The numbers keep ftbench's definitions: docs/measurements.md, "ftbench and
ado, side by side", says what each difference does to a value.
"""

from __future__ import annotations

from typing import Any

#: ado measured property -> ftbench Metrics field (snake_case; camelCase on the wire).
ADO_PROPERTIES: dict[str, str] = {
    "dataset_tokens_per_second_per_gpu": "dataset_tokens_per_second_per_gpu",
    "train_runtime": "train_runtime_seconds",
    "dataset_tokens_per_second": "dataset_tokens_per_second",
    "train_samples_per_second": "train_samples_per_second",
    "train_steps_per_second": "train_steps_per_second",
    "train_tokens_per_second": "train_tokens_per_second",
    "train_tokens_per_gpu_per_second": "train_tokens_per_gpu_per_second",
    "cpu_compute_utilization": "cpu_compute_utilization_percent",
    "cpu_memory_utilization": "cpu_memory_utilization_percent",
    "gpu_compute_utilization_min": "gpu_compute_utilization_min_percent",
    "gpu_compute_utilization_avg": "gpu_compute_utilization_avg_percent",
    "gpu_compute_utilization_max": "gpu_compute_utilization_max_percent",
    "gpu_memory_utilization_min": "gpu_memory_utilization_min_percent",
    "gpu_memory_utilization_avg": "gpu_memory_utilization_avg_percent",
    "gpu_memory_utilization_max": "gpu_memory_utilization_max_percent",
    "gpu_memory_utilization_peak": "gpu_memory_utilization_peak_percent",
    "gpu_power_watts_min": "gpu_power_min_watts",
    "gpu_power_watts_avg": "gpu_power_avg_watts",
    "gpu_power_watts_max": "gpu_power_max_watts",
    "gpu_power_percent_min": "gpu_power_min_percent",
    "gpu_power_percent_avg": "gpu_power_avg_percent",
    "gpu_power_percent_max": "gpu_power_max_percent",
}

#: ftbench's own properties written after ado's in an ado-named export, under names ado does not
#: use (``ftbench_`` first), so an analysis can set like beside like: ado's cpu_memory_utilization is
#: the node's memory in use, while ftbench's, following seed note 2, is the training processes'.
FTBENCH_EXTRAS: dict[str, str] = {
    "ftbench_node_memory_used_percent": "node_memory_used_percent",
    # How sure the throughput is (docs/measurements.md "How sure a number is").
    "ftbench_steady_state_tokens_per_second": "steady_state_tokens_per_second",
    "ftbench_steady_state_tokens_per_second_ci95_low": "steady_state_tokens_per_second_ci95_low",
    "ftbench_steady_state_tokens_per_second_ci95_high": "steady_state_tokens_per_second_ci95_high",
    "ftbench_throughput_ci95_relative": "throughput_ci95_relative",
    "ftbench_measured_steps": "measured_steps",
    "ftbench_noise_flags": "noise_flags",
}

#: ado entity-space parameter -> ftbench spec field (camelCase, as stored with each run).
ADO_PARAMETERS: dict[str, str] = {
    "model_name": "model",
    "number_gpus": "numberGpus",
    "batch_size": "batchSize",
    "model_max_length": "modelMaxLength",
    "gpu_model": "gpuModel",
    "dataset_id": "datasetId",
    "number_nodes": "numberNodes",
    "torch_dtype": "torchDtype",
    "fms_hf_tuning_version": "fmsHfTuningVersion",
    "distributed_backend": "distributedBackend",
}

#: Which run a row comes from and what became of it, after ftbench's extras (ado has no such columns:
#: its store keeps only measured entities). ``ftbench_status`` is the run's phase (Succeeded, Invalid,
#: Failed, Interrupted, ...), so rows of runs that measured nothing can be told from measured ones;
#: ``ftbench_engine_version`` is the release (fms-hf-tuning) or trl version that actually ran.
RUN_COLUMNS: tuple[str, ...] = ("ftbench_run_id", "ftbench_status", "ftbench_engine", "ftbench_engine_version")

#: Column order of an ado-named export: ado's columns in its order, then ftbench's extras and run columns.
ADO_COLUMNS: tuple[str, ...] = (
    "experiment_id",
    *ADO_PARAMETERS,
    "is_valid",
    *ADO_PROPERTIES,
    *FTBENCH_EXTRAS,
    *RUN_COLUMNS,
)
FMS_HF_TUNING = "fms-hf-tuning"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _cell(value: Any) -> Any:
    """A list (the noise flags) as one `;`-joined cell, so CSV and JSON rows read alike."""
    return ";".join(map(str, value)) if isinstance(value, list) else value


def ado_rows(
    experiment: str,
    spec: dict[str, Any],
    results: list[dict[str, Any]],
    *,
    run_id: str = "",
    status: str = "",
    engine: str = FMS_HF_TUNING,
) -> list[dict[str, Any]]:
    """One row per trial result with ado's names: its parameters from the spec, `is_valid`, the
    measured properties (absent, None, where the run produced no metrics, as ado omits them),
    ftbench's extras and the run columns.
    `experiment` is written with ado's registered id (its `gptq` spelling). `fms_hf_tuning_version` is
    the release that ran (the spec's when the run never started), and empty for a trl run, which
    used no fms-hf-tuning at all."""
    from ftbench.contracts.enums import EXPERIMENT_ALIASES

    ado_id = next((alias for alias, canonical in EXPERIMENT_ALIASES.items() if canonical == experiment), experiment)
    params = {ado: spec.get(field) for ado, field in ADO_PARAMETERS.items()}
    rows = []
    for result in results or [{}]:
        metrics = result.get("metrics") or {}
        ran = (result.get("environment") or {}).get("engineVersion") or None
        fms = (ran or params["fms_hf_tuning_version"]) if engine == FMS_HF_TUNING else None
        row: dict[str, Any] = {"experiment_id": ado_id, **params, "fms_hf_tuning_version": fms}
        row["is_valid"] = result.get("isValid")
        row.update(
            {name: _cell(metrics.get(_camel(field))) for name, field in (ADO_PROPERTIES | FTBENCH_EXTRAS).items()}
        )
        if metrics:  # seed 001: ado's GPU properties are 0.0 where no GPU was used (ftbench leaves them absent)
            row.update({name: 0.0 for name in ADO_PROPERTIES if name.startswith("gpu_") and row[name] is None})
        row.update(zip(RUN_COLUMNS, (run_id, status, engine, ran), strict=True))
        rows.append(row)
    return rows
