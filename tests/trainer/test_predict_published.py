"""The memory predictor against published GPU measurements (tests/trainer/data/published_memory.yaml).

Every in-scope row is predicted from its stated configuration (architecture, method, LoRA, dtype,
batch, sequence length, checkpointing, GPUs, sharding): the fits/OOM verdict against the GPU
model's memory (the profile's gpuMemory, with its runtime overhead) must be the published one, and
a measured peak (torch.cuda.max_memory_allocated) must be within 10 %. docs/benchmarks.md carries the
table (predicted, published, error); FTBENCH_UPDATE_GOLDEN=1 rewrites it, and this test fails when it
is stale. The rows out of scope are listed there with their reasons.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import fresh_doc_section

pytest.importorskip("torch")
pytest.importorskip("peft")

from ftbench.api.profile import ClusterProfile
from ftbench.contracts.prediction import MemoryPrediction, MemorySplit
from ftbench.predict.prediction import memory_fit
from ftbench_trainer.predict.model import predict_step
from ftbench_trainer.predict.shard import Sharding
from ftbench_trainer.predict.step import StepShape

REPO = Path(__file__).resolve().parents[2]
DATA = yaml.safe_load((Path(__file__).parent / "data" / "published_memory.yaml").read_text())
DOCS = REPO / "docs" / "benchmarks.md"
UNITS = {"GB": 1e9, "GiB": 2**30}
TOLERANCE = 0.10


def predict_row(row: dict[str, Any]) -> tuple[int, Any]:
    """(predicted peak bytes, the verdict against the row's GPU) for a published configuration."""
    from transformers import AutoConfig

    fields = dict(row["architecture"])
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    lora = row.get("lora") or {}
    shape = StepShape(
        method=row["method"], dtype=row["dtype"], autocast=None, attention="sdpa",
        checkpointing=row["gradient_checkpointing"], batch=row["batch"], seq=row["sequence_length"], device="cuda",
        lora_r=lora.get("r", 8), lora_alpha=lora.get("alpha", 16), lora_dropout=lora.get("dropout", 0.0),
        lora_targets=tuple(lora["targets"]) if lora else None,
    )  # fmt: skip
    sharding = Sharding(row["sharding"], row["gpus"]) if row["gpus"] > 1 else Sharding("none")
    peak = predict_step(config, shape, sharding)
    split = MemorySplit(parameters_bytes=peak.split.parameters, gradients_bytes=peak.split.gradients,
                        optimizer_bytes=peak.split.optimizer, activations_bytes=peak.split.other)  # fmt: skip
    prediction = MemoryPrediction(
        peak_bytes=peak.bytes, split=split, phase=peak.phase, device="cuda", world_size=row["gpus"],
        sharding=sharding.label, traced_parameters=peak.trace.parameters, trainable_parameters=peak.trace.trainable,
        seconds=peak.trace.seconds,
    )  # fmt: skip
    return peak.bytes, memory_fit(prediction, row["gpu_model"], ClusterProfile())


def measured_bytes(row: dict[str, Any]) -> float | None:
    m = row.get("measured")
    return m["value"] * UNITS[m["units"]] if m else None


def render(results: dict[str, tuple[int, Any]]) -> str:
    lines = [
        "| row | model, method | batch x seq, GPUs | predicted peak | published | error | predicted verdict | published |",
        "| --- | --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for row in DATA["rows"]:
        peak, fit = results[row["id"]]
        measured = measured_bytes(row)
        unit = row["measured"]["units"] if row.get("measured") else "GB"
        published = f"{row['measured']['value']} {unit}" if measured else "OOM"
        error = f"{100 * (peak - measured) / measured:+.1f} %" if measured else ""
        sharded = f", {row['sharding']}" if row["gpus"] > 1 else ""
        lines.append(
            f"| {row['id']} | {row['model']}, {row['method']} | {row['batch']} x {row['sequence_length']}, "
            f"{row['gpus']} x {row['gpu_model']}{sharded} | {peak / UNITS[unit]:.2f} {unit} | {published} | {error} | "
            f"{'fits' if fit.fits else 'OOM'} ({fit.predicted_percent:.0f} %) | {'OOM' if row['oom'] else 'fits'} |"
        )
    lines += ["", "Out of scope, with the reason:", ""]
    lines += [f"- {r['id']}: {r['reason']} ({r['source'].split()[0]})" for r in DATA["out_of_scope"]]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[int, Any]]:
    return {row["id"]: predict_row(row) for row in DATA["rows"]}


@pytest.mark.parametrize("row", DATA["rows"], ids=[r["id"] for r in DATA["rows"]])
def test_published_row(row: dict[str, Any], results: dict[str, tuple[int, Any]]) -> None:
    peak, fit = results[row["id"]]
    assert fit is not None, f"{row['gpu_model']} is not in the profile's gpuMemory"
    assert fit.fits is not row["oom"], (row["id"], fit.sentence())
    measured = measured_bytes(row)
    if measured is not None:
        assert peak == pytest.approx(measured, rel=TOLERANCE), row["id"]


def test_the_docs_table_is_fresh(results: dict[str, tuple[int, Any]]) -> None:
    fresh_doc_section(DOCS, "published-memory", render(results))
