"""Every fix a refusal suggests is tested (issue 45 item 5): for every rule of the API, a spec that breaks it,
the words of the fix its message gives, and the spec with that fix applied, which must validate as a whole.

A refusal whose advice leads to another refusal sends a user round in circles; this table is where each
piece of advice is followed once. The rules each experiment of the catalog brings (the values it allows, the
LoRA fields it leaves unset, the fields it fixes) are generated from the catalog the same way they are made,
and a rule that no value can break (an experiment that allows every torch dtype) is named as such. A new rule
without a row here fails `test_every_rule_has_its_fix_tested`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import ftbench.api
from ftbench.api.profile import ClusterProfile
from ftbench.api.rules import all_rules
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import validate_spec_dict
from ftbench.catalog import ExperimentEntry, load_catalog

CATALOG = load_catalog()
GPU = "NVIDIA-A100-SXM4-80GB"
BASE: dict[str, Any] = {
    "model": "llama3.1-8b",
    "modelMaxLength": 1024,
    "numberGpus": 2,
    "batchSize": 4,
    "gpuModel": GPU,
}
TINY: dict[str, Any] = {"experiment": "finetune_lora_benchmark-v1.0.0", "model": "ftbench-tiny-llama",
                        "modelMaxLength": 512, "numberGpus": 2, "batchSize": 2, "gpuModel": GPU}  # fmt: skip
CPU: dict[str, Any] = {**TINY, "numberGpus": 0, "gpuModel": None}
REMOVE = None  # a fix value: take the field out of the spec


@dataclass(frozen=True)
class Case:
    rule: str
    bad: dict[str, Any]  # merged into `base`
    fix: dict[str, Any]  # merged after `bad` (REMOVE deletes the field); the result must validate
    says: tuple[str, ...]  # the fix as the message words it
    base: dict[str, Any] = field(default_factory=lambda: BASE)
    profile: dict[str, Any] | None = None  # a cluster profile's refusals (validate --profile, the operator)


def apply(spec: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with ``patch`` merged in (one level into ``run``), REMOVE deleting a field."""
    out = dict(spec)
    for key, value in patch.items():
        if key == "run" and isinstance(value, dict) and isinstance(out.get("run"), dict):
            value = {k: v for k, v in {**out["run"], **value}.items() if v is not REMOVE}
        if value is REMOVE:
            out.pop(key, None)
        else:
            out[key] = value
    return {k: v for k, v in out.items() if v is not REMOVE}


CASES: list[Case] = [
    Case("is_valid.1", {"batchSize": 3}, {"batchSize": 4}, ("multiple",)),
    Case("is_valid.2", {"numberGpus": 6, "batchSize": 12, "numberNodes": 4}, {"numberNodes": 3}, ("numberNodes",)),
    Case("is_valid.5", {"gpuModel": ""}, {"gpuModel": GPU}, ("gpuModel",)),
    Case("is_valid.6", {"fastMoe": 3, "fmsHfTuningVersion": "3.1.0", "model": "mixtral-8x7b-instruct-v0.1"},
         {"fastMoe": 2}, ("fastMoe",)),
    Case("is_valid.7", {"fastMoe": 2, "fmsHfTuningVersion": "3.1.0"}, {"fastMoe": REMOVE}, ("fastMoe",)),
    Case("steps.nonzero", {"maxSteps": 0}, {"maxSteps": 10}, ("maxSteps",)),
    Case("steps.warmup", {"maxSteps": 10, "warmupSteps": 10}, {"warmupSteps": 9}, ("use at most 9",)),
    Case("steps.warmup-epochs", {"maxSteps": -1, "numTrainEpochs": 1.0, "datasetId": "news-chars-512-entries-4096",
                                 "batchSize": 16, "warmupSteps": 64}, {"warmupSteps": 63}, ("at most 64",)),
    Case("stop.precision-steps", {"targetPrecisionPercent": 1.0, "maxSteps": 25, "warmupSteps": 5},
         {"maxSteps": 26}, ("raise maxSteps above 25",)),
    Case("stop.precision-seconds", {"targetPrecisionPercent": 1.0, "maxSteps": -1, "stopAfterSeconds": 30.0},
         {"stopAfterSeconds": 31.0}, ("stopAfterSeconds",)),
    Case("repeats.one-node", {"repeats": 3, "numberNodes": 2, "numberGpus": 4}, {"numberNodes": 1},
         ("numberNodes 1",)),
    Case("batch.cpu-nodes", {"numberGpus": 0, "numberNodes": 2, "batchSize": 3}, {"batchSize": 4}, ("batchSize",),
         base=CPU),
    Case("backend.none-single-node", {"numberGpus": 8, "batchSize": 8, "numberNodes": 2, "distributedBackend": "None"},
         {"distributedBackend": "FSDP"}, ("FSDP",)),
    Case("engine.trl-text-only", {"engine": "trl", "model": "granite-vision-3.2-2b",
                                  "datasetId": "vision-384x384-16384plus-entries-4096"},
         {"engine": "fms-hf-tuning", "fmsHfTuningVersion": "3.2.2"}, ("set engine fms-hf-tuning with fmsHfTuningVersion 3.2.2",)),
    Case("engine.trl-acceleration", {"engine": "trl", "fastKernels": [True, True, True]}, {"fastKernels": REMOVE},
         ("fastKernels",)),
    Case("catalog.model", {"model": "gpt-9"}, {"model": "llama3.1-8b"}, ("ftbench catalog models",)),
    Case("catalog.dataset", {"datasetId": "no-such-dataset"}, {"datasetId": "news-chars-512-entries-4096"},
         ("news-chars-512-entries-4096",)),
    Case("catalog.lora-targets", {"experiment": "finetune_lora_benchmark-v1.0.0", "model": "granite-3b-1.5"},
         {"targetModules": ["c_attn"]}, ("set targetModules, e.g. [c_attn]",)),
    Case("engine.fms-installable", {"fmsHfTuningVersion": "3.0.0.1"}, {"fmsHfTuningVersion": "3.0.0"}, ("use 3.0.0",)),
    Case("engine.fms-known-defect", {"experiment": "finetune_pt_benchmark-v1.0.0", "fmsHfTuningVersion": "3.2.2"},
         {"fmsHfTuningVersion": "2.7.1"}, ("2.7.1",)),
    Case("engine.fast-moe-version", {"fastMoe": 2, "model": "mixtral-8x7b-instruct-v0.1"},
         {"fmsHfTuningVersion": "3.1.0"}, ("3.1.0",)),
    Case("engine.fms-vision-version", {"model": "granite-vision-3.2-2b", "datasetId": "vision-384x384-16384plus-entries-4096"},
         {"fmsHfTuningVersion": "3.2.2"}, ("set fmsHfTuningVersion to one of 3.2.2",)),
    Case("engine.fms-eager-attention", {"attentionImplementation": "eager", "fmsHfTuningVersion": "2.8.2"},
         {"attentionImplementation": REMOVE}, ("attentionImplementation",)),
    Case("engine.fms-dataset-kwargs", {"datasetKwargsSkipPrepareDataset": True}, {"datasetKwargsSkipPrepareDataset": False},
         ("leave datasetKwargsSkipPrepareDataset false",)),
    Case("engine.optimizer", {"engine": "trl", "optim": "adamw_hf"}, {"optim": "adamw_torch"}, ("adamw_torch",)),
    Case("run.require-roce", {"run": {"requireRoce": True}}, {"run": {"requireRoce": REMOVE}}, ("requireRoce",)),
    Case("run.network-check-only", {"run": {"networkPreflight": "only"}, "numberGpus": 1, "batchSize": 4},
         {"numberGpus": 2}, ("numberGpus",)),
    Case("device.gpu-needs-gpus", {"device": "gpu"}, {"device": "cpu"}, ("device cpu",), base=CPU),
    Case("attention.flash-needs-gpu", {"attentionImplementation": "flash_attention_2"},
         {"attentionImplementation": "sdpa"}, ("sdpa",), base=CPU),
    Case("device.cpu-backend", {"device": "cpu", "distributedBackend": "None"}, {"distributedBackend": "FSDP"},
         ("FSDP",)),
    Case("fsdp.hybrid-multi-node", {"fsdpShardingStrategy": "HYBRID_SHARD"}, {"fsdpShardingStrategy": "FULL_SHARD"},
         ("FULL_SHARD",)),
    Case("fsdp.v2-settings", {"fsdpVersion": 2, "fsdpShardingStrategy": "NO_SHARD"}, {"fsdpVersion": 1},
         ("fsdpVersion 1",)),
    Case("fsdp.v2-engine", {"fmsHfTuningVersion": "2.1.2", "fsdpVersion": 2}, {"fmsHfTuningVersion": "3.1.0"},
         ("fmsHfTuningVersion 3.1.0 or newer",)),
    Case("fsdp.v2-engine", {"fmsHfTuningVersion": "2.1.2", "fsdpVersion": 2, "fsdpStateDictType": "SHARDED_STATE_DICT"},
         {"fmsHfTuningVersion": "3.0.0"}, ("fmsHfTuningVersion 3.0.0 or newer",)),
    Case("fsdp.v2-state-dict", {"fmsHfTuningVersion": "3.0.0", "fsdpVersion": 2},
         {"fsdpStateDictType": "SHARDED_STATE_DICT"}, ("SHARDED_STATE_DICT",)),
    Case("fsdp.offload-fsdp1-cpu", {"device": "cpu", "fsdpVersion": 1, "fsdpOffloadParams": True}, {"fsdpVersion": 2},
         ("fsdpVersion 2",), base={**TINY, "engine": "trl"}),
    Case("bounds.memory", {"run": {"memory": "2Pi"}}, {"run": {"memory": "8Ti"}}, ("8Ti",)),
    Case("data.whole-step", {"datasetId": "news-tokens-128kplus-entries-320", "batchSize": 128}, {"batchSize": 80},
         ("at most 80",)),
    Case("data.response-fits", {"datasetId": "news-chars-1024-entries-4096", "modelMaxLength": 100},
         {"modelMaxLength": 256}, ("e.g. 256",)),
    Case("data.rows-train", {"datasetId": "news-chars-512-entries-4096", "modelMaxLength": 224}, {"modelMaxLength": 230},
         ("use modelMaxLength 229 or more",), base=CPU),
    Case("model.positions", {"model": "mistral-7b-v0.1", "modelMaxLength": 65536}, {"modelMaxLength": 32768},
         ("32768 or less",)),
    Case("applied.fp8", {"accelerateConfigMixedPrecision": "fp8"}, {"accelerateConfigMixedPrecision": "bf16"},
         ("use bf16",)),
    Case("applied.mixed-precision-launcher", {"numberGpus": 1, "accelerateConfigMixedPrecision": "bf16"},
         {"accelerateConfigMixedPrecision": REMOVE}, ("accelerateConfigMixedPrecision",)),
    Case("applied.fp16-gpu", {"numberNodes": 2, "accelerateConfigMixedPrecision": "fp16"},
         {"accelerateConfigMixedPrecision": "bf16"}, ("bf16",), base={**CPU, "engine": "trl"}),
    Case("applied.fsdp-settings", {"distributedBackend": "DDP", "fsdpShardingStrategy": "NO_SHARD"},
         {"fsdpShardingStrategy": REMOVE}, ("fsdpShardingStrategy",)),
    Case("applied.backend-one-process", {"numberGpus": 1, "batchSize": 1, "distributedBackend": "FSDP"},
         {"distributedBackend": REMOVE}, ("distributedBackend",), base=TINY),
    Case("applied.fms-release-trl", {"engine": "trl", "fmsHfTuningVersion": "2.4.0"}, {"fmsHfTuningVersion": REMOVE},
         ("fmsHfTuningVersion",)),
    Case("applied.gpu-model-no-gpu", {"numberGpus": 0}, {"gpuModel": REMOVE}, ("gpuModel",), base=TINY),
    Case("applied.precision-conflict", {"bf16": True, "accelerateConfigMixedPrecision": "fp16"},
         {"accelerateConfigMixedPrecision": "bf16"}, ("bf16",), base=TINY),
    Case("applied.reentrant", {"gradientCheckpointing": False, "gradientCheckpointingUseReentrant": True},
         {"gradientCheckpointingUseReentrant": REMOVE}, ("gradientCheckpointingUseReentrant",)),
    Case("applied.image-field", {"datasetImageField": "images"}, {"datasetImageField": REMOVE},
         ("datasetImageField",)),
    Case("applied.gpu-kernels", {"fastKernels": [True, False, False]}, {"fastKernels": REMOVE}, ("fastKernels",),
         base=CPU),
    Case("packing.engine", {"packing": True}, {"engine": "trl"}, ("engine trl",)),
    Case("packing.prompt-tuning", {"packing": True, "engine": "trl", "experiment": "finetune_pt_benchmark-v1.0.0"},
         {"packing": REMOVE}, ("packing",)),
    Case("liger.gpu-trl", {"ligerKernel": True}, {"engine": "trl"}, ("engine trl",)),
    Case("deepspeed.settings", {"deepspeedZeroStage": 3}, {"deepspeedZeroStage": REMOVE}, ("deepspeedZeroStage",)),
    Case("runtime.job-one-node", {"numberGpus": 16, "batchSize": 16, "numberNodes": 2, "run": {"runtime": "Job"}},
         {"run": {"runtime": "PyTorchJob"}}, ("PyTorchJob",)),
    Case("runtime.pytorchjob-one-trial", {"repeats": 3, "run": {"runtime": "PyTorchJob"}}, {"run": {"runtime": "Job"}},
         ("Job",)),
    Case("runtime.indexedjob-precise-repeats", {"repeats": 3, "targetPrecisionPercent": 3.0,
                                                "run": {"runtime": "IndexedJob"}},
         {"run": {"runtime": "Job"}}, ("Job",)),
    Case("runtime.trainjob-priority", {"run": {"runtime": "TrainJob", "priorityClassName": "batch-high"}},
         {"run": {"priorityClassName": REMOVE}}, ("priorityClassName",)),
    Case("engine.target-modules", {"experiment": "finetune_lora_benchmark-v1.0.0", "targetModules": ["foo_proj"]},
         {"targetModules": ["q_proj", "v_proj"]}, ("q_proj", "v_proj")),
    Case("engine.layer-class", {"accelerateConfigFsdpTransformerLayerClsToWrap": "FooLayer"},
         {"accelerateConfigFsdpTransformerLayerClsToWrap": "LlamaDecoderLayer"}, ("use LlamaDecoderLayer",)),
]  # fmt: skip


# What a cluster refuses, with its profile (ftbench.api.validation.check_profile_rules).
MULTI_NODE: dict[str, Any] = {"numberNodes": 2, "numberGpus": 16, "batchSize": 16}
PROFILE_CASES: list[Case] = [
    Case("profile.priority-class", {"run": {"priorityClassName": "batch-low"}}, {"run": {"priorityClassName": "batch-high"}},
         ("batch-high",), profile={"allowedPriorityClasses": ["batch-high"]}),
    Case("profile.no-roce", {**MULTI_NODE, "enableRoce": True, "run": {"requireRoce": True}},
         {"run": {"requireRoce": REMOVE}}, ("remove run.requireRoce",), profile={}),
    Case("profile.gpus-per-node", {"numberGpus": 8, "batchSize": 8}, {"numberNodes": 2}, ("set numberNodes to 2",),
         profile={"gpusPerNode": 4}),
    Case("profile.runtime", MULTI_NODE, {"numberNodes": 1, "numberGpus": 8},
         ("set spec.numberNodes to 1 and spec.numberGpus to at most 8",),
         profile={"features": {"indexedJobs": False, "trainingOperator": False}}),
    Case("profile.runtime", {**MULTI_NODE, "numberGpus": 8, "batchSize": 8}, {"numberNodes": 1},
         ("set spec.numberNodes to 1 (with 8 GPUs on one node)",),
         profile={"features": {"indexedJobs": False, "trainingOperator": False}}),
    Case("profile.flash-attention", {"attentionImplementation": "flash_attention_2"}, {"attentionImplementation": "sdpa"},
         ("set attentionImplementation to sdpa or auto",), profile={"flashAttention": False}),
    Case("profile.flash-attention", {"attentionImplementation": "flash_attention_2"}, {"attentionImplementation": "auto"},
         ("set attentionImplementation to sdpa or auto",), profile={"flashAttention": False}),
]  # fmt: skip


def _experiment_base(exp: ExperimentEntry) -> dict[str, Any]:
    """A spec of experiment ``exp`` that validates (a GPTQ model where it trains GPTQ weights)."""
    spec = {**BASE, "experiment": exp.name.value}
    if exp.weights == "gptq":
        spec |= {"model": "llama-7b", "torchDtype": "float16"}
    return spec


def _experiment_cases() -> tuple[list[Case], dict[str, str]]:
    """The rules experiments bring (ftbench/api/rules/experiments.py), each broken by every value it refuses,
    and the rules no value of the API can break, with the reason."""
    cases: list[Case] = []
    unbreakable: dict[str, str] = {}
    fields = {"torch-dtype": "torch_dtype", "backend": "distributed_backend", "engine": "engine"}
    for exp in CATALOG.experiments.values():
        name = exp.name.value
        short = name.removeprefix("finetune_").rsplit("-v", 1)[0]
        base = _experiment_base(exp)
        allowed_by = {"torch-dtype": exp.torch_dtypes, "backend": exp.backends, "engine": exp.engines}
        for suffix, field_name in fields.items():
            info = FineTuneExperimentSpec.model_fields[field_name]
            alias, allowed = info.alias or field_name, [v.value for v in allowed_by[suffix]]
            enum = type(allowed_by[suffix][0])
            refused = [v.value for v in enum if v.value not in allowed]
            rule = f"experiment.{short}.{suffix}"
            if not refused:
                unbreakable[rule] = f"{name} allows every {alias}"
            optional = info.default is None
            fix = {alias: REMOVE} if optional else {alias: allowed[0]}
            says = (f"remove {alias}",) if optional else (f"set {alias} to",)
            cases += [Case(rule, {alias: value}, fix, says, base) for value in refused]
        if not exp.lora:
            for alias, value in (("r", 8), ("loraAlpha", 16), ("targetModules", ["q_proj"])):
                cases.append(Case(f"experiment.{short}.no-lora.{alias}", {alias: value}, {alias: REMOVE},
                                  ("remove it",), base))  # fmt: skip
        if not exp.multi_node:
            cases.append(Case(f"experiment.{short}.single-node", {"numberNodes": 2, "numberGpus": 4},
                              {"numberNodes": 1}, ("set numberNodes to 1",), base))  # fmt: skip
        if exp.allowed is not None:
            cases.append(
                Case(f"experiment.{short}.fixed", {"maxSteps": 3}, {"maxSteps": REMOVE}, ("remove them",), base)
            )
    return cases, unbreakable


EXPERIMENT_CASES, UNBREAKABLE = _experiment_cases()
ALL_CASES = CASES + EXPERIMENT_CASES + PROFILE_CASES


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: f"{c.rule}:{'-'.join(map(str, c.bad.values()))}"[:90])
def test_the_fix_a_refusal_names_gives_a_valid_spec(case: Case) -> None:
    profile = None if case.profile is None else ClusterProfile.model_validate(case.profile)
    spec = apply(case.base, case.bad)
    issues = {i.rule: i for i in validate_spec_dict(spec, profile=profile).issues}
    assert case.rule in issues, f"{case.rule} did not refuse {case.bad}: {sorted(issues)}"
    message = issues[case.rule].message
    for words in case.says:
        assert words in message, f"the fix {case.fix} is not what {case.rule} says: {message}"
    fixed = validate_spec_dict(apply(spec, case.fix), profile=profile)
    assert fixed.ok, f"following {case.rule}'s advice ({message}) leaves: {fixed.summary()}"


def test_the_bases_validate() -> None:
    for base in (BASE, TINY, CPU, *(_experiment_base(e) for e in CATALOG.experiments.values())):
        assert validate_spec_dict(apply(base, {})).ok, base


def test_every_rule_has_its_fix_tested() -> None:
    """The spec's rules (all_rules) and the profile's refusals, as ftbench/api names them."""
    api = Path(ftbench.api.__file__).parent
    profile_rules = {m for f in api.glob("*.py") for m in re.findall(r'"(profile\.[a-z-]+)"', f.read_text())}
    rules = {r.id for r in all_rules(CATALOG)} | profile_rules
    covered = {c.rule for c in ALL_CASES} | set(UNBREAKABLE)
    assert rules - covered == set(), "rules whose fix no case follows"
    assert covered - rules == set(), "cases of rules that no longer exist"
