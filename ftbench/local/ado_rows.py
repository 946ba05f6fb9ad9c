"""ado's runs as ftbench specs: the one place where ado's SFTTrainer parameters map onto ftbench's API.

ado users hold tables of their own runs (ado's sample store exported as CSV; IBM's public
LLMFineTuningBench is one). `ftbench results --import ado FILE` brings such rows into the local results
store beside ftbench's runs, and `bench/fleet.py` predicts every row of ado's fleet sample; both read a
row here, so a row means the same thing to both. The mapping: docs/measurements.md, "ado's rows", and
the table in the design notes. Measured properties keep ado's names (`is_valid`, `gpu_memory_utilization_peak`, ...).

Design notes: docs/design-notes.md, "ftbench/local/ado_rows.py".
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ftbench.engines.releases import load_releases

# Earlier actuator ids of the same experiments (ado's table keeps them; the fleet README says so).
EXPERIMENT_PREFIXES: Final = (
    ("finetune-full-", "finetune_full_benchmark-v1.0.0"),
    ("finetune-lora-", "finetune_lora_benchmark-v1.0.0"),
    ("finetune-gptq-lora-", "finetune_gtpq-lora_benchmark-v1.0.0"),
    ("finetune_gptq-lora_", "finetune_gtpq-lora_benchmark-v1.0.0"),
)
RELEASE_ALIASES: Final = {"3": "3.0.0"}
GPU_MODELS: Final = {"L40S": "NVIDIA-L40S"}
# ado's column, then the fleet sample's short name for it.
COLUMNS: Final = {
    "experiment": ("experiment_id", "exp"),
    "model_max_length": ("model_max_length", "tokens_per_sample"),
    "fast_kernels": ("fast_kernels", "fk"),
    "use_reentrant": ("gradient_checkpointing_use_reentrant", "gc"),
    "auto_stop": ("auto_stop_method", "autostop"),
}
MEASURED: Final = (
    "gpu_memory_utilization_peak",
    "dataset_tokens_per_second",
    "train_tokens_per_second",
    "train_runtime",
    "gpu_compute_utilization_avg",
)


@dataclass(frozen=True)
class AdoRow:
    """One ado run: the ftbench spec it maps to (None, with the reason, where it does not) and what ado measured."""

    line: int  # 1-based data row
    spec: dict[str, Any] | None
    reason: str | None
    is_valid: bool
    measured: dict[str, float] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)


def _get(row: Mapping[str, str], key: str) -> str:
    for name in COLUMNS.get(key, (key,)):
        if row.get(name) not in (None, ""):
            return str(row[name]).strip()
    return ""


def _flag(value: str) -> bool:
    return value.lower() in ("1", "true", "yes") or value.startswith("WARMUP")


def experiment_of(ado_id: str) -> str | None:
    base = ado_id.split("@")[0].strip()
    if base.endswith("-v1.0.0") and base.startswith("finetune_"):
        return base
    return next((ours for prefix, ours in EXPERIMENT_PREFIXES if base.startswith(prefix)), None)


def release_of(version: str) -> str | None:
    version = RELEASE_ALIASES.get(version, version)
    known = {r.version for r in load_releases().installable}
    return version if version in known else None


def spec_of(row: Mapping[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """The FineTuneExperiment spec of an ado row, or None and why it has none."""
    experiment = experiment_of(_get(row, "experiment"))
    if experiment is None:
        return None, f"experiment {_get(row, 'experiment')!r} is none of seed 001's"
    release = release_of(_get(row, "fms_hf_tuning_version"))
    if release is None:
        return None, f"fms_hf_tuning_version {_get(row, 'fms_hf_tuning_version')!r} is not a published release"
    gpus = int(float(_get(row, "number_gpus") or 1))
    spec: dict[str, Any] = {
        "experiment": experiment,
        "engine": "fms-hf-tuning",
        "fmsHfTuningVersion": release,
        "model": _get(row, "model_name"),
        "numberGpus": gpus,
        "numberNodes": int(float(_get(row, "number_nodes") or 1)),
        "batchSize": int(float(_get(row, "batch_size"))),
        "modelMaxLength": int(float(_get(row, "model_max_length"))),
        "fastMoe": int(float(_get(row, "fast_moe") or 0)),
        "enableRoce": _flag(_get(row, "enable_roce")),
        "gradientCheckpointingUseReentrant": _flag(_get(row, "use_reentrant")),
    }
    gpu = _get(row, "gpu_model")
    if gpu:
        spec["gpuModel"] = GPU_MODELS.get(gpu, gpu)
    if _flag(_get(row, "fast_kernels")):
        spec["fastKernels"] = [True, True, True]
    if _flag(_get(row, "auto_stop")):
        spec["autoStopMethod"] = "WARMUP_60S_STABLE_120S_OR_10_STEPS"
    if gpus > 1:
        spec["fsdpUseOrigParams"] = False
        spec["fsdpVersion"] = 1
    return spec, None


def read_ado_csv(text: str) -> list[AdoRow]:
    """Every data row of an ado CSV export, mapped."""
    out = []
    for line, row in enumerate(csv.DictReader(io.StringIO(text)), start=1):
        spec, reason = spec_of(row)
        measured = {k: float(row[k]) for k in MEASURED if row.get(k) not in (None, "")}
        valid = _flag(str(row.get("is_valid", "")))
        out.append(AdoRow(line=line, spec=spec, reason=reason, is_valid=valid, measured=measured, raw=dict(row)))
    return out
