"""ftbench.sweep.fill: the sweep `ftbench predict SWEEP --fill-gpus` writes, from expanded points and the fewest
GPUs each fits on (pure: the predictions are tests/local/test_predict_cli.py's)."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api.sweep import FineTuneSweepSpec
from ftbench.catalog import load_catalog
from ftbench.sweep.fill import TooManyPoints, filled_sweep
from ftbench.sweep.points import expand

CATALOG = load_catalog()
TEMPLATE = {"model": "llama3.1-8b", "gpuModel": "NVIDIA-A100-SXM4-80GB", "numberGpus": 8, "batchSize": 16,
            "modelMaxLength": 2048, "maxSteps": 10, "distributedBackend": "FSDP"}  # fmt: skip


def document(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneSweep", "metadata": {"name": "s"},
            "spec": {"template": TEMPLATE, **spec}}  # fmt: skip


def fill(doc: dict[str, Any], fewest: dict[int, tuple[int, int]]) -> dict[str, Any]:
    expansion = expand(FineTuneSweepSpec.model_validate(doc["spec"]), CATALOG)
    assert expansion.ok
    out = filled_sweep(doc, expansion.points, fewest)
    assert expand(FineTuneSweepSpec.model_validate(out["spec"]), CATALOG).ok  # a sweep that validates as written
    return out


def test_every_point_becomes_one_entry_with_its_fewest_gpus() -> None:
    doc = document(matrix={"batchSize": [16, 32], "modelMaxLength": [1024, 2048]}, exclude=[{"batchSize": 32,
                   "modelMaxLength": 2048}])  # fmt: skip
    out = fill(doc, {0: (2, 1), 1: (4, 1), 2: (16, 2)})
    assert "matrix" not in out["spec"] and "exclude" not in out["spec"]
    assert out["spec"]["include"] == [
        {"batchSize": 16, "modelMaxLength": 1024, "numberGpus": 2, "numberNodes": 1},
        {"batchSize": 16, "modelMaxLength": 2048, "numberGpus": 4, "numberNodes": 1},
        {"batchSize": 32, "modelMaxLength": 1024, "numberGpus": 16, "numberNodes": 2},
    ]


def test_a_point_without_an_answer_keeps_its_shape() -> None:
    out = fill(document(matrix={"batchSize": [16, 32]}), {0: (4, 1)})
    assert out["spec"]["include"][1] == {"batchSize": 32, "numberGpus": 8}


def test_one_gpu_points_leave_the_distributed_settings_to_the_others() -> None:
    out = fill(document(matrix={"batchSize": [16, 32]}), {0: (1, 1), 1: (2, 1)})
    assert "distributedBackend" not in out["spec"]["template"]
    assert out["spec"]["include"] == [
        {"batchSize": 16, "numberGpus": 1, "numberNodes": 1},
        {"distributedBackend": "FSDP", "batchSize": 32, "numberGpus": 2, "numberNodes": 1},
    ]


def test_more_points_than_include_holds_is_refused_with_the_fix() -> None:
    doc = document(matrix={"batchSize": [16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176],
                           "modelMaxLength": [512, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 4608, 5120]})  # fmt: skip
    expansion = expand(FineTuneSweepSpec.model_validate(doc["spec"]), CATALOG)
    with pytest.raises(TooManyPoints, match="split the sweep"):
        filled_sweep(doc, expansion.points, {})
