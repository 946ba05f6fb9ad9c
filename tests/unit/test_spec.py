"""The spec model: seed defaults, camelCase wire names, immutability, effective values."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ftbench.api import effective
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts.enums import DistributedBackend, Experiment, TorchDtype

CATALOG = load_catalog()
BASE = {"model": "llama3.1-8b", "modelMaxLength": 2048, "numberGpus": 8, "batchSize": 16, "gpuModel": "G"}


def spec(**overrides: object) -> FineTuneExperimentSpec:
    return FineTuneExperimentSpec.model_validate({**BASE, **overrides})


def test_seed_defaults() -> None:
    s = spec()
    assert s.experiment == Experiment.FULL
    assert s.dataset_id == "news-tokens-16384plus-entries-4096"
    assert s.gradient_checkpointing is True
    assert s.gradient_accumulation_steps == 4
    assert s.max_steps == -1 and s.num_train_epochs == 1.0 and s.stop_after_seconds == -1.0
    assert s.number_nodes == 1 and s.fms_hf_tuning_version == "2.1.2"
    assert s.fast_moe == 0 and s.fast_kernels is None and s.optim == "adamw_torch"
    assert s.bf16 is False and s.gradient_checkpointing_use_reentrant is False
    assert s.fsdp_sharding_strategy == "FULL_SHARD" and s.fsdp_state_dict_type == "FULL_STATE_DICT"
    assert s.fsdp_use_orig_params is True and s.accelerate_config_mixed_precision == "no"
    assert s.remove_unused_columns is True and s.dataset_kwargs_skip_prepare_dataset is False


def test_experiment_dependent_defaults() -> None:
    assert effective.torch_dtype(spec(), CATALOG) == TorchDtype.BFLOAT16
    gptq = spec(experiment=Experiment.GPTQ_LORA.value, model="llama-7b")
    assert effective.torch_dtype(gptq, CATALOG) == TorchDtype.FLOAT16
    assert effective.distributed_backend(spec()) == DistributedBackend.FSDP
    assert effective.distributed_backend(spec(numberGpus=1, batchSize=1)) is None
    lora = spec(experiment=Experiment.LORA.value)
    assert (effective.lora_r(lora), effective.lora_alpha(lora)) == (4, 16)
    assert effective.target_modules(lora, CATALOG) == ("q_proj", "v_proj")
    assert effective.max_steps(spec(experiment=Experiment.FULL_STABILITY.value), CATALOG) == 5


def test_batch_split_over_gpus_and_nodes() -> None:
    s = spec(numberNodes=2)
    assert effective.gpus_per_node(s) == 4
    assert effective.world_size(s) == 8
    assert effective.per_device_batch_size(s) == 2
    cpu = spec(numberGpus=0, batchSize=4, gpuModel="")
    assert effective.per_device_batch_size(cpu) == 4 and effective.world_size(cpu) == 1


def test_wire_names_are_camel_case_and_snake_case_is_accepted() -> None:
    wire = spec().to_wire()
    assert "modelMaxLength" in wire and "model_max_length" not in wire
    snake = FineTuneExperimentSpec.model_validate(
        {"model": "llama-7b", "model_max_length": 1, "number_gpus": 0, "batch_size": 1}
    )
    assert snake.model_max_length == 1


def test_unknown_fields_and_mutation_are_rejected() -> None:
    with pytest.raises(ValidationError, match="batchSizes"):
        spec(batchSizes=3)
    with pytest.raises(ValidationError):
        spec().batch_size = 3  # type: ignore[misc]
