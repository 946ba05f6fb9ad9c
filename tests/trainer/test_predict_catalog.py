"""Every catalog model with an architecture is predicted on CPU, from the catalog alone (no weights,
no config.json, nothing downloaded), for LoRA and full fine-tuning on one 80 GB A100: the traced
parameter count is the architecture's, LoRA trains a sliver of it, and full fine-tuning needs at
least the mixed-precision rule of thumb's 16 bytes per parameter unless it is sharded."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts.enums import Runtime
from ftbench.contracts.plan import ExperimentRef
from ftbench.render.plan import build_plan
from ftbench_trainer.predict.model import predict

CATALOG = load_catalog()
WITH_ARCHITECTURE = sorted(name for name, m in CATALOG.models.items() if m.architecture)


def plan_for(model: str, experiment: str, **spec: object):
    weights = CATALOG.models[model].weights
    if experiment.startswith("finetune_gtpq") and not weights.gptq:
        pytest.skip(f"{model} has no GPTQ weights")
    wire = {
        "experiment": experiment, "model": model, "modelMaxLength": 512, "numberGpus": 1, "batchSize": 1,
        "gpuModel": "NVIDIA-A100-SXM4-80GB", "torchDtype": "bfloat16", **spec,
    }  # fmt: skip
    parsed = FineTuneExperimentSpec.model_validate(wire)
    return build_plan(parsed, CATALOG, ClusterProfile(), ref=ExperimentRef(name="p"), runtime=Runtime.JOB)


def test_the_catalog_has_architectures_with_their_sources():
    assert len(WITH_ARCHITECTURE) >= 10
    for name in WITH_ARCHITECTURE:
        model = CATALOG.models[name]
        assert model.architecture_source, name
        assert model.architecture and "model_type" in model.architecture, name


@pytest.mark.parametrize("model", WITH_ARCHITECTURE)
def test_every_catalog_architecture_is_predicted_without_weights(model: str):
    lora = predict(plan_for(model, "finetune_lora_benchmark-v1.0.0", engine="trl"))
    assert "architecture: the catalog's (no config.json here)" in lora.notes
    assert 0 < lora.trainable_parameters < lora.traced_parameters / 50
    # bfloat16 weights: two bytes per parameter, all of them on the one GPU.
    assert lora.split.parameters_bytes == pytest.approx(2 * lora.traced_parameters, rel=0.01)
