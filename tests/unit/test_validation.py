"""Every seed is_valid rule and experiment constraint, with the messages users see."""

from __future__ import annotations

import pytest

from ftbench.api.validation import validate_document, validate_spec_dict

OK = {"model": "llama3.1-8b", "modelMaxLength": 2048, "numberGpus": 8, "batchSize": 16, "gpuModel": "G"}


def rules(**overrides: object) -> set[str]:
    return {i.rule for i in validate_spec_dict({**OK, **overrides}).issues}


def test_valid_spec_has_no_issues() -> None:
    report = validate_spec_dict(OK)
    assert report.ok and report.spec is not None


@pytest.mark.parametrize(
    ("overrides", "rule"),
    [
        ({"batchSize": 12, "numberGpus": 8}, "is_valid.1"),
        ({"numberGpus": 6, "batchSize": 12, "numberNodes": 4}, "is_valid.2"),
        ({"numberNodes": 0}, "is_valid.3"),
        ({"batchSize": 0}, "is_valid.4"),
        ({"gpuModel": ""}, "is_valid.5"),
        ({"fastMoe": 3, "fmsHfTuningVersion": "3.1.0", "model": "mixtral-8x7b-instruct-v0.1"}, "is_valid.6"),
        (
            {"fastMoe": 16, "numberGpus": 16, "fmsHfTuningVersion": "3.1.0", "model": "granite-3.1-3b-a800m-instruct"},
            "is_valid.7",
        ),
        ({"fastMoe": 2, "fmsHfTuningVersion": "3.1.0"}, "is_valid.7"),  # dense model
        ({"fastMoe": 2, "model": "mixtral-8x7b-instruct-v0.1"}, "engine.fast-moe-version"),
        ({"engine": "trl", "fastKernels": [True, True, True]}, "engine.trl-acceleration"),
        ({"maxSteps": 0}, "steps.nonzero"),
        ({"numberGpus": 0, "numberNodes": 2, "batchSize": 3}, "batch.cpu-nodes"),
        (
            {"engine": "trl", "model": "granite-vision-3.2-2b", "datasetId": "vision-384x384-16384plus-entries-4096"},
            "engine.trl-text-only",
        ),
        ({"model": "gpt-9"}, "catalog.model"),
        ({"datasetId": "vision-384x384-16384plus-entries-4096"}, "catalog.dataset"),
        ({"experiment": "finetune_gtpq-lora_benchmark-v1.0.0", "model": "llama3.1-8b"}, "catalog.model"),
        (
            {"experiment": "finetune_gtpq-lora_benchmark-v1.0.0", "model": "llama-7b", "torchDtype": "bfloat16"},
            "experiment.gtpq-lora_benchmark.torch-dtype",
        ),
        (
            {"experiment": "finetune_gtpq-lora_benchmark-v1.0.0", "model": "llama-7b", "engine": "trl"},
            "experiment.gtpq-lora_benchmark.engine",
        ),
        ({"experiment": "finetune_full_stability-v1.0.0", "numberNodes": 2}, "experiment.full_stability.single-node"),
        (
            {"experiment": "finetune_full_stability-v1.0.0", "distributedBackend": "DDP"},
            "experiment.full_stability.backend",
        ),
        ({"experiment": "finetune_full_stability-v1.0.0", "maxSteps": 3}, "experiment.full_stability.fixed"),
        ({"experiment": "finetune_pt_benchmark-v1.0.0", "r": 8}, "experiment.pt_benchmark.no-lora.r"),
        ({"experiment": "finetune_lora_benchmark-v1.0.0", "model": "granite-3b-1.5"}, "catalog.lora-targets"),
        (
            {"attentionImplementation": "flash_attention_2", "numberGpus": 0, "gpuModel": ""},
            "attention.flash-needs-gpu",
        ),
        ({"attentionImplementation": "flash_attention_2", "device": "cpu"}, "attention.flash-needs-gpu"),
        ({"attentionImplementation": "eager", "fmsHfTuningVersion": "2.8.2"}, "engine.fms-eager-attention"),
        ({"packing": True}, "packing.engine"),  # fms-hf-tuning is the default engine
        ({"distributedBackend": "DeepSpeed"}, "deepspeed.settings"),  # fms-hf-tuning has no deepspeed
        (
            {"distributedBackend": "DeepSpeed", "engine": "trl", "deepspeedOffload": "optimizerAndParameters"},
            "deepspeed.settings",
        ),  # parameter offload needs ZeRO-3
        ({"deepspeedZeroStage": 3}, "deepspeed.settings"),  # without the DeepSpeed backend it would do nothing
        ({"run": {"networkPreflight": "only"}, "numberGpus": 1, "batchSize": 4}, "run.network-check-only"),
        ({"run": {"networkPreflight": "only"}, "repeats": 3}, "run.network-check-only"),
        ({"packing": True, "engine": "trl", "experiment": "finetune_pt_benchmark-v1.0.0"}, "packing.prompt-tuning"),
    ],
)
def test_each_rule_fires(overrides: dict, rule: str) -> None:
    assert rule in rules(**overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        {"attentionImplementation": "eager", "fmsHfTuningVersion": "3.1.0"},
        {"attentionImplementation": "eager", "engine": "trl", "numberGpus": 0, "gpuModel": ""},
        {"attentionImplementation": "sdpa", "fmsHfTuningVersion": "2.8.2"},
        {"attentionImplementation": "flash_attention_2"},
        {"packing": True, "engine": "trl"},
        {"run": {"networkPreflight": "only"}},
        {
            "distributedBackend": "DeepSpeed",
            "engine": "trl",
            "deepspeedZeroStage": 3,
            "deepspeedOffload": "optimizerAndParameters",
        },
        {"distributedBackend": "DeepSpeed", "engine": "trl", "deepspeedOffload": "optimizer"},
        {"packing": True, "engine": "trl", "experiment": "finetune_lora_benchmark-v1.0.0"},
    ],
)
def test_attention_implementations_that_can_run_are_valid(overrides: dict) -> None:
    assert rules(**overrides) == set()


def test_fast_moe_valid_case() -> None:
    assert rules(fastMoe=4, fmsHfTuningVersion="3.1.0", model="mixtral-8x7b-instruct-v0.1") == set()


def test_cpu_multi_node_is_valid() -> None:
    """0 GPUs over 2 nodes: the CPU/gloo path the end-to-end tests use."""
    assert rules(numberGpus=0, gpuModel="", numberNodes=2, batchSize=4) == set()


def test_issue_names_field_value_rule_and_fix() -> None:
    issue = validate_spec_dict({**OK, "batchSize": 12}).issues[0]
    text = str(issue)
    assert issue.path == "spec.batchSize" and issue.value == 12
    assert "12" in text and "is_valid.1" in text and "multiple of 8" in text


def test_type_errors_are_issues_not_exceptions() -> None:
    report = validate_spec_dict({**OK, "numberGpus": "eight", "optim": "adam", "typo": 1})
    assert report.spec is None
    paths = {i.path for i in report.issues}
    assert paths == {"spec.numberGpus", "spec.optim", "spec.typo"}
    assert any("not a FineTuneExperiment field" in i.message for i in report.issues)


def test_missing_required_fields() -> None:
    report = validate_spec_dict({})
    assert {i.path for i in report.issues} == {"spec.model", "spec.modelMaxLength", "spec.numberGpus", "spec.batchSize"}


def test_document_envelope_is_checked() -> None:
    report = validate_document({"apiVersion": "v1", "kind": "Pod", "spec": OK})
    assert {i.path for i in report.issues} == {"apiVersion", "kind", "metadata.name"}
    assert not validate_document("nope").ok


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"targetModules": ["q_proj", "--max_steps", "999999", "--output_dir", "/data/x"]}, "targetModules"),
        ({"targetModules": ["q_proj"] * 65}, "targetModules"),
        ({"datasetTextField": "--output_dir"}, "datasetTextField"),
        ({"datasetImageField": "-x"}, "datasetImageField"),
        ({"gpuModel": "NVIDIA A100"}, "gpuModel"),
        ({"gpuModel": "G" * 64}, "gpuModel"),
        ({"model": "--model"}, "model"),
        ({"datasetId": "-d"}, "datasetId"),
        ({"batchSize": 10**9}, "batchSize"),
        ({"numberGpus": 4096}, "numberGpus"),
        ({"numTrainEpochs": 1e300}, "numTrainEpochs"),
        ({"stopAfterSeconds": -5}, "stopAfterSeconds"),
        ({"run": {"activeDeadlineSeconds": 10**12}}, "run.activeDeadlineSeconds"),
    ],
)
def test_free_text_and_absurd_values_are_invalid_naming_the_field(overrides: dict, field: str) -> None:
    """Issue 12: nothing a user writes can become a flag, a bad label, or an absurd run."""
    report = validate_spec_dict({**OK, **overrides})
    assert not report.ok
    assert any(i.path.removeprefix("spec.").startswith(field) for i in report.issues), report.summary()


def test_a_value_that_reads_as_a_flag_never_reaches_the_command_line() -> None:
    """Defence in depth: even a plan built around validation cannot put '-x' after a flag."""
    from ftbench.api.profile import ClusterProfile
    from ftbench.catalog import load_catalog
    from ftbench.contracts.enums import Runtime
    from ftbench.contracts.plan import ExperimentRef
    from ftbench.engines.fms_args import sft_trainer_args
    from ftbench.render.plan import build_plan

    spec = validate_spec_dict({**OK, "experiment": "finetune_lora_benchmark-v1.0.0"}).spec
    assert spec is not None
    plan = build_plan(spec, load_catalog(), ClusterProfile(), ref=ExperimentRef(name="x"), runtime=Runtime.JOB)
    assert sft_trainer_args(plan, dataset_path="/data/d.jsonl")
    peft = plan.training.peft.model_copy(update={"target_modules": ("q_proj", "--max_steps", "9")})
    forged = plan.model_copy(update={"training": plan.training.model_copy(update={"peft": peft})})
    with pytest.raises(ValueError, match="read as a flag"):
        sft_trainer_args(forged, dataset_path="/data/d.jsonl")


def test_an_epoch_run_keeps_steps_after_its_warmup() -> None:
    """Issue 45: a warmupSteps beyond an epoch-based run's steps became 0 and the "steady" rate was one step.
    The steps are at most entries / global batch x epochs (fewer where rows are dropped)."""
    epochs = {"maxSteps": -1, "numTrainEpochs": 1.0, "datasetId": "news-chars-512-entries-4096", "batchSize": 16}
    # 16 per pass x 4 accumulation steps (the seed's default) = 64 samples per step: 4096 / 64 = 64 steps at most
    found = validate_spec_dict({**OK, **epochs, "warmupSteps": 64}).issues
    [issue] = [i for i in found if i.rule == "steps.warmup-epochs"]
    assert "at most 64 optimizer steps (4096 entries / 64 samples per step)" in issue.message
    assert "steps.warmup-epochs" not in rules(**epochs, warmupSteps=63)  # the fix it names validates
    assert "steps.warmup-epochs" not in rules(**{**epochs, "numTrainEpochs": 2.0}, warmupSteps=64)
    assert "steps.warmup-epochs" in rules(**{**epochs, "numTrainEpochs": 1.5}, warmupSteps=96)


def test_a_precision_target_that_could_never_stop_the_run_is_refused_with_a_fix_that_validates() -> None:
    target = {"targetPrecisionPercent": 1.0, "precisionMinSteps": 20}
    [issue] = [i for i in validate_spec_dict({**OK, **target, "maxSteps": 25, "warmupSteps": 5}).issues]
    assert issue.rule == "stop.precision-steps" and "raise maxSteps above 25" in issue.message
    assert "stop.precision-steps" not in rules(**target, maxSteps=26, warmupSteps=5)  # the fix it names
    assert "stop.precision-steps" not in rules(**target, maxSteps=-1)  # epochs: the target may end them
    found = rules(**target, maxSteps=-1, stopAfterSeconds=30.0, precisionMinSeconds=30.0)
    assert "stop.precision-seconds" in found
    assert "stop.precision-seconds" not in rules(**target, maxSteps=-1, stopAfterSeconds=31.0)
    assert rules(targetPrecisionPercent=60.0) and rules(targetPrecisionPercent=0) and rules(precisionMinSteps=3)


def test_repeats_with_a_precision_target_run_one_job_each() -> None:
    """An Indexed Job would run every repeat; auto picks one Job per repeat, an explicit IndexedJob is refused."""
    from ftbench.api.profile import ClusterProfile
    from ftbench.api.runtime_choice import preferred_runtime
    from ftbench.api.spec import FineTuneExperimentSpec
    from ftbench.catalog import load_catalog
    from ftbench.contracts.enums import Runtime

    spec = FineTuneExperimentSpec.model_validate({**OK, "repeats": 3, "targetPrecisionPercent": 2.0})
    assert preferred_runtime(spec, load_catalog(), ClusterProfile()).runtime == Runtime.JOB
    plain = spec.model_copy(update={"target_precision_percent": None})
    assert preferred_runtime(plain, load_catalog(), ClusterProfile()).runtime == Runtime.INDEXED_JOB
    found = validate_spec_dict({**OK, "repeats": 3, "targetPrecisionPercent": 2.0, "run": {"runtime": "IndexedJob"}})
    assert any("could not stop at targetPrecisionPercent" in i.message for i in found.issues), found.issues
