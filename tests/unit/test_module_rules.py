"""targetModules and FSDP layer classes name modules the model has in the spec's engine stack (issue 45).

`targetModules: [foo_proj]` passed validation and failed at run time; a wrong name beside right ones
trained fewer adapters than asked. The names come from ftbench/engines/data/modules.yaml (each catalog
architecture built in each stack's transformers); tests/trainer/test_module_table.py keeps it fresh.
"""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api.validation import validate_spec_dict
from ftbench.catalog import load_catalog
from ftbench.engines.modules import model_modules, targets

LORA: dict[str, Any] = {
    "experiment": "finetune_lora_benchmark-v1.0.0",
    "model": "ftbench-tiny-llama",
    "modelMaxLength": 256,
    "batchSize": 2,
    "numberGpus": 0,
}


def rules(spec: dict[str, Any]) -> list[tuple[str, str]]:
    return [(i.rule, i.message) for i in validate_spec_dict(spec, load_catalog()).issues]


@pytest.mark.parametrize(
    "names", [["q_proj"], ["q_proj", "v_proj", "down_proj"], ["self_attn.q_proj"], ["layers.0.self_attn.k_proj"]]
)
def test_names_the_model_has_pass(names: list[str]) -> None:
    assert rules(LORA | {"targetModules": names}) == []


def test_no_matching_name_would_fail_and_one_wrong_name_would_train_less() -> None:
    [(rule, message)] = rules(LORA | {"targetModules": ["foo_proj"]})
    assert rule == "engine.target-modules" and "find no target and fail" in message
    assert "ftbench-tiny-llama under fms-hf-tuning 2.1.2 (transformers 4.45.2)" in message and "q_proj" in message
    [(rule, message)] = rules(LORA | {"targetModules": ["q_proj", "foo_proj"]})
    assert message.startswith("targetModules foo_proj:") and "train fewer adapters" in message
    [(rule, _)] = rules(LORA | {"targetModules": ["mlp.q_proj"]})  # a suffix of no module's path
    assert rule == "engine.target-modules"


def test_the_stack_decides_mixtral_experts() -> None:
    """transformers 5 (the trl stack) fuses Mixtral's experts into one parameter: w1 is no module there,
    while the fms-hf-tuning releases' transformers 4 have a Linear per expert."""
    mixtral = LORA | {"model": "mixtral-8x7b-instruct-v0.1", "numberGpus": 8, "gpuModel": "NVIDIA-A100-SXM4-80GB",
                      "batchSize": 8, "distributedBackend": "FSDP", "targetModules": ["w1"]}  # fmt: skip
    fms = {"engine": "fms-hf-tuning", "fmsHfTuningVersion": "2.4.0"}
    assert "engine.target-modules" not in dict(rules(mixtral | fms))
    assert "engine.target-modules" in dict(rules(mixtral | {"engine": "trl"}))


def test_layer_classes_are_the_models() -> None:
    spec = LORA | {"numberGpus": 0}
    field = "accelerateConfigFsdpTransformerLayerClsToWrap"
    assert "engine.layer-class" not in dict(rules(spec | {field: "LlamaDecoderLayer"}))
    message = dict(rules(spec | {field: "LlamaDecoderLayer,FooLayer"}))["engine.layer-class"]
    assert message.startswith(f"{field} FooLayer:") and "use LlamaDecoderLayer" in message


def test_the_suggested_names_validate() -> None:
    """The fix a refusal names is one that passes (issue 45 item 5)."""
    message = dict(rules(LORA | {"targetModules": ["foo_proj"]}))["engine.target-modules"]
    suggested = message.rsplit("use names from ", 1)[1].split(", ")
    assert "q_proj" in suggested
    for name in suggested:
        assert "engine.target-modules" not in dict(rules(LORA | {"targetModules": [name]})), name


def test_what_the_table_does_not_know_is_not_judged() -> None:
    catalog = load_catalog()
    assert model_modules("trl", "granite-vision-3.2-2b", catalog) is None  # vision towers are not listed
    assert model_modules("2.0.1", "granite-3.1-2b", catalog) is None  # transformers 4.44 cannot build granite
    # a model without an architecture: the union of its decoder class's models
    union = model_modules("trl", "granite-8b-code-instruct", catalog)
    assert union is not None and any(targets("q_proj", p) for p in union["targets"])


def test_peft_suffix_matching() -> None:
    path = "model.layers.*.self_attn.q_proj"
    assert targets("q_proj", path) and targets("self_attn.q_proj", path) and targets("layers.3.self_attn.q_proj", path)
    assert not targets("proj", path) and not targets("layers.x.self_attn.q_proj", path)
    assert not targets("a.b.c.d.e.f.q_proj", path)
