"""ado's identifiers in ftbench specs: its GPTQ spelling, its model-map shorthand, FSDP without a
catalog layer class, and seed 001's distributedBackend None (DataParallel)."""

from __future__ import annotations

import pytest

from ftbench.api import effective
from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import validate_spec_dict
from ftbench.catalog import load_catalog
from ftbench.contracts.enums import Experiment, Runtime
from ftbench.contracts.plan import ExperimentRef
from ftbench.render.plan import build_plan

ADO_GPTQ = "finetune_gptq-lora_benchmark-v1.0.0"
GPTQ = {"model": "llama-7b", "modelMaxLength": 1024, "numberGpus": 2, "batchSize": 4, "gpuModel": "G"}
FULL = {"model": "granite-3.1-2b", "modelMaxLength": 1024, "numberGpus": 4, "batchSize": 8, "gpuModel": "G"}


def _plan(spec: FineTuneExperimentSpec, profile: ClusterProfile | None = None):
    profile = profile or ClusterProfile()
    catalog = catalog_for(profile)
    return build_plan(spec, catalog, profile, ref=ExperimentRef(name="x"), runtime=Runtime.JOB)


def test_ado_gptq_spelling_is_accepted_and_stored_canonically() -> None:
    report = validate_spec_dict({**GPTQ, "experiment": ADO_GPTQ})
    assert report.ok, report.issues
    assert report.spec is not None and report.spec.experiment is Experiment.GPTQ_LORA
    assert report.spec.model_dump(by_alias=True)["experiment"] == "finetune_gtpq-lora_benchmark-v1.0.0"
    seed = validate_spec_dict({**GPTQ, "experiment": Experiment.GPTQ_LORA.value}).spec
    assert _plan(report.spec).model_dump() == _plan(seed).model_dump()


def test_ado_gptq_spelling_gets_the_gptq_rules() -> None:
    rules = {i.rule for i in validate_spec_dict({**GPTQ, "experiment": ADO_GPTQ, "torchDtype": "bfloat16"}).issues}
    assert "experiment.gtpq-lora_benchmark.torch-dtype" in rules


def test_unknown_experiment_spelling_is_refused() -> None:
    report = validate_spec_dict({**GPTQ, "experiment": "finetune_qptq-lora_benchmark-v1.0.0"})
    assert not report.ok and any(i.path == "spec.experiment" for i in report.issues)


@pytest.mark.parametrize(
    ("model", "vanilla", "gptq"),
    [
        ("granite-7b-base", "ibm-granite/granite-7b-base", "/hf-models-pvc/granite-7b-base-gtpq"),
        ("mistral-7b-v0.1", "/hf-models-pvc/mistralai-mistral-7b-v0.1", "/hf-models-pvc/mistral-7B-v0.3-gptq"),
        (
            "mixtral-8x7b-instruct-v0.1",
            "/hf-models-pvc/Mixtral-8x7B-Instruct-v0.1",
            "/hf-models-pvc/mixtral_8x7b_instruct_v0.1_gptq",
        ),
        ("granite-4.0-1b", "ibm-granite/granite-4.0-1b", None),
        # 'dir/subdir' PVC paths resolve under modelRoot, not as Hugging Face ids
        ("granite-13b-v2", "/hf-models-pvc/granite-13b-base-v2/step_300000_ckpt", None),
        ("mistral-123b-v2", "/hf-models-pvc/mistral-large/fp16_240620", None),
    ],
)
def test_seed_002_weight_layout(model: str, vanilla: str, gptq: str | None) -> None:
    for experiment, ref in ((Experiment.FULL, vanilla), (Experiment.GPTQ_LORA, gptq)):
        if ref is None:
            continue
        spec = FineTuneExperimentSpec.model_validate({**GPTQ, "experiment": experiment, "model": model})
        assert _plan(spec).model.ref == ref


def test_model_map_string_shorthand_names_vanilla_weights() -> None:
    catalog = load_catalog().with_model_map({"my-llama": "org/my-llama", "llama-7b": "/w/llama"})
    assert catalog.models["my-llama"].weights.vanilla == "org/my-llama"
    assert catalog.models["llama-7b"].weights.vanilla == "/w/llama"
    assert catalog.models["llama-7b"].weights.gptq == "LLaMa/models/hf/7B-gptq"  # the rest is kept
    profile = ClusterProfile.model_validate({"modelMap": {"my-llama": "org/my-llama"}})
    assert catalog_for(profile).models["my-llama"].weights.vanilla == "org/my-llama"
    with pytest.raises(ValueError, match=r"model_map\.x"):
        load_catalog().with_model_map({"x": ""})  # type: ignore[dict-item]


def test_fsdp_without_a_catalog_layer_class_is_accepted_and_left_to_the_trainer() -> None:
    """ado falls back to the model's `_no_split_modules`; the trainer reads it at launch."""
    profile = ClusterProfile.model_validate({"modelMap": {"my-llama": "org/my-llama"}})
    spec_dict = {**FULL, "model": "my-llama"}
    assert validate_spec_dict(spec_dict, catalog_for(profile)).ok
    plan = _plan(FineTuneExperimentSpec.model_validate(spec_dict), profile)
    assert plan.distributed_backend == "FSDP"
    assert plan.accelerate_config is not None
    assert "fsdp_transformer_layer_cls_to_wrap" not in plan.accelerate_config["fsdp_config"]


def test_distributed_backend_none_is_one_data_parallel_process() -> None:
    spec = FineTuneExperimentSpec.model_validate({**FULL, "distributedBackend": "None"})
    assert validate_spec_dict({**FULL, "distributedBackend": "None"}).ok
    plan = _plan(spec)
    assert plan.launcher == "direct" and plan.accelerate_config is None and plan.distributed_backend is None
    assert plan.topology.world_size == 1 and plan.topology.processes_per_node == 1
    assert plan.topology.gpus_per_node == 4
    # HF Trainer multiplies the per-device batch by the GPUs DataParallel drives: 2 x 4 = batchSize 8.
    assert effective.per_device_batch_size(spec) * plan.topology.gpus_per_node == 8
    assert any("DataParallel" in n for n in plan.notes)


def test_distributed_backend_none_is_refused_on_several_nodes() -> None:
    report = validate_spec_dict({**FULL, "numberGpus": 8, "numberNodes": 2, "distributedBackend": "None"})
    assert {i.rule for i in report.issues} >= {"backend.none-single-node"}
    issue = next(i for i in report.issues if i.rule == "backend.none-single-node")
    assert "numberNodes 1" in issue.message
