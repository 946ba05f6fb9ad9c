"""Issue 27's offline rules: each refusal names the field, the value, the rule and what to change."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api.profile import ClusterProfile
from ftbench.api.validation import validate_spec_dict

BASE: dict[str, Any] = {"model": "llama3.1-8b", "modelMaxLength": 1024, "numberGpus": 2, "batchSize": 4,
                        "gpuModel": "NVIDIA-A100-SXM4-80GB"}  # fmt: skip


def refused(extra: dict[str, Any], profile: ClusterProfile | None = None) -> dict[str, Any]:
    issues = validate_spec_dict({**BASE, **extra}, profile=profile).issues
    return {i.rule: i for i in issues}


@pytest.mark.parametrize(
    ("extra", "rule", "path", "value"),
    [
        ({"datasetId": "news-tokens-128kplus-entries-320", "batchSize": 128}, "data.whole-step", "spec.batchSize", 128),
        ({"datasetId": "news-chars-1024-entries-4096", "modelMaxLength": 100}, "data.response-fits",
         "spec.modelMaxLength", 100),
        ({"model": "mistral-7b-v0.1", "modelMaxLength": 65536}, "model.positions", "spec.modelMaxLength", 65536),
        ({"run": {"memory": "2Pi"}}, "bounds.memory", "spec.run.memory", "2Pi"),
        ({"run": {"memory": "100Mi"}}, "bounds.memory", "spec.run.memory", "100Mi"),
        ({"accelerateConfigMixedPrecision": "fp8"}, "applied.fp8", "spec.accelerateConfigMixedPrecision", "fp8"),
        ({"numberGpus": 1, "accelerateConfigMixedPrecision": "bf16"}, "applied.mixed-precision-launcher",
         "spec.accelerateConfigMixedPrecision", "bf16"),
        ({"numberGpus": 0, "numberNodes": 2, "accelerateConfigMixedPrecision": "fp16"}, "applied.fp16-gpu",
         "spec.accelerateConfigMixedPrecision", "fp16"),
        ({"distributedBackend": "DDP", "fsdpShardingStrategy": "NO_SHARD"}, "applied.fsdp-settings",
         "spec.distributedBackend", "DDP"),
        ({"gradientCheckpointing": False, "gradientCheckpointingUseReentrant": True}, "applied.reentrant",
         "spec.gradientCheckpointingUseReentrant", True),
        ({"datasetImageField": "images"}, "applied.image-field", "spec.datasetImageField", "images"),
        ({"numberGpus": 0, "fastKernels": [True, False, False]}, "applied.gpu-kernels", "spec.numberGpus", 0),
    ],
)  # fmt: skip
def test_each_refusal_names_field_value_rule_and_fix(extra, rule, path, value):
    issue = refused(extra)[rule]
    assert (issue.path, issue.value) == (path, value)
    assert any(word in issue.message for word in ("use ", "remove", "lower", "set ")), issue.message


def test_the_accepted_neighbours_of_each_refusal_pass():
    for extra in (
        {"datasetId": "news-tokens-128kplus-entries-320", "batchSize": 80},  # 80 x 4 = 320
        {"datasetId": "news-chars-1024-entries-4096", "modelMaxLength": 129},
        {"model": "mistral-7b-v0.1", "modelMaxLength": 32768},
        {"run": {"memory": "8Ti"}},
        {"accelerateConfigMixedPrecision": "bf16"},
        {"distributedBackend": "FSDP", "fsdpShardingStrategy": "NO_SHARD"},
    ):
        assert validate_spec_dict({**BASE, **extra}).ok, extra


def test_priority_classes_follow_the_profile_allow_list():
    default = ClusterProfile()
    assert "profile.priority-class" in refused({"run": {"priorityClassName": "system-node-critical"}}, default)
    assert not refused({"run": {"priorityClassName": "batch-high"}}, default)
    listed = ClusterProfile.model_validate({"allowedPriorityClasses": ["batch-high"]})
    issue = refused({"run": {"priorityClassName": "batch-low"}}, listed)["profile.priority-class"]
    assert issue.path == "spec.run.priorityClassName" and "batch-high" in issue.message
    assert not refused({"run": {"priorityClassName": "batch-high"}}, listed)


def test_validate_reports_what_the_server_refuses_all_at_once():
    """Issue 27.9: a bad name, a snake_case key, a string for a number and a bad enum in one report."""
    from ftbench.api.validation import validate_document

    doc = {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneExperiment", "metadata": {"name": "Lora_1"},
           "spec": {**BASE, "batch_size": 8, "numberGpus": "2", "optim": "adam", "run": {"queue_name": "q"}}}  # fmt: skip
    paths = {i.path: i for i in validate_document(doc).issues}
    assert set(paths) == {"metadata.name", "spec.batch_size", "spec.numberGpus", "spec.optim", "spec.run.queue_name"}
    assert "write batchSize" in paths["spec.batch_size"].message
    assert "write queueName" in paths["spec.run.queue_name"].message
    assert "DNS-1123" in paths["metadata.name"].message


def test_the_whole_step_fix_can_be_followed() -> None:
    """Issue 45: batch 1 with 65536 accumulation steps was told to lower batchSize to at most 1. The fix names
    what can change, and applying it gives a spec that validates."""
    from ftbench.api.validation import validate_spec_dict

    base = {"experiment": "finetune_lora_benchmark-v1.0.0", "model": "ftbench-tiny-llama", "modelMaxLength": 512,
            "numberGpus": 2, "gpuModel": "NVIDIA-A100-SXM4-80GB", "datasetId": "news-chars-512-entries-4096"}  # fmt: skip
    refused = validate_spec_dict({**base, "batchSize": 2, "gradientAccumulationSteps": 65536})
    (issue,) = [i for i in refused.issues if i.rule == "data.whole-step"]
    assert "lower gradientAccumulationSteps (at most 2048 with batchSize 2)" in issue.message
    assert validate_spec_dict({**base, "batchSize": 2, "gradientAccumulationSteps": 2048}).ok
    big = validate_spec_dict({**base, "batchSize": 4096, "gradientAccumulationSteps": 4})
    (issue,) = [i for i in big.issues if i.rule == "data.whole-step"]
    assert "lower batchSize (at most 1024 with this accumulation)" in issue.message
    assert validate_spec_dict({**base, "batchSize": 1024, "gradientAccumulationSteps": 4}).ok


@pytest.mark.parametrize(
    ("extra", "rule"),
    [
        ({"distributedBackend": "FSDP"}, "applied.backend-one-process"),
        ({"distributedBackend": "DDP", "numberGpus": 0, "gpuModel": None}, "applied.backend-one-process"),
        ({"engine": "trl", "fmsHfTuningVersion": "2.4.0"}, "applied.fms-release-trl"),
        ({"numberGpus": 0}, "applied.gpu-model-no-gpu"),
        ({"numberGpus": 2, "batchSize": 2, "bf16": True, "accelerateConfigMixedPrecision": "fp16"},
         "applied.precision-conflict"),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(f"{k}={w}" for k, w in v.items()),
)  # fmt: skip
def test_a_setting_that_would_not_be_applied_is_refused_with_the_reason(extra: dict, rule: str) -> None:
    """Issue 45: these were accepted and only noted (or silently dropped); what status records must have run."""
    from ftbench.api.validation import validate_spec_dict

    spec = {"experiment": "finetune_lora_benchmark-v1.0.0", "model": "ftbench-tiny-llama", "modelMaxLength": 512,
            "numberGpus": 1, "batchSize": 1, "gpuModel": "NVIDIA-A100-SXM4-80GB", **extra}  # fmt: skip
    report = validate_spec_dict({k: v for k, v in spec.items() if v is not None})
    assert [i.rule for i in report.issues] == [rule], report.summary()
    assert "would not be applied" in report.issues[0].message or "one run has one" in report.issues[0].message
