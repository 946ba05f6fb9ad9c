"""The `tuning.sft_trainer` command line of seed 001, from a LaunchPlan.

The trainer runs exactly these arguments for engine fms-hf-tuning, and tests feed them to
fms-hf-tuning's own argument parser, so the command line is one the engine really takes.
"""

from __future__ import annotations

import json

from ftbench.api.enums import version_tuple
from ftbench.contracts.plan import LaunchPlan

FAST_MOE_MIN_VERSION = (2, 4, 0)


def _bool(value: bool) -> str:
    return "True" if value else "False"


def sft_trainer_args(plan: LaunchPlan, *, dataset_path: str, model_path: str | None = None) -> list[str]:
    """dataset_path: the file the trainer resolved (generated or plan.dataset.path)."""
    t = plan.training
    args = [
        "--model_name_or_path", model_path or plan.model.ref,
        "--torch_dtype", t.torch_dtype.value,
        "--use_flash_attn", _bool(t.use_flash_attn),
        "--training_data_path", dataset_path,
        "--response_template", t.response_template,
        "--dataset_text_field", t.dataset_text_field,
        "--log_level", "debug",
        "--num_train_epochs", repr(float(t.num_train_epochs)),
        "--max_steps", str(t.max_steps),
        "--per_device_train_batch_size", str(plan.topology.per_device_batch_size),
        "--max_seq_length", str(t.model_max_length),
        "--eval_strategy", "no",
        "--output_dir", plan.output.dir,
        "--gradient_accumulation_steps", str(t.gradient_accumulation_steps),
        "--save_strategy", "no",
        "--learning_rate", repr(t.learning_rate),
        "--weight_decay", repr(t.weight_decay),
        "--warmup_ratio", repr(t.warmup_ratio),
        "--lr_scheduler_type", t.lr_scheduler_type,
        "--logging_steps", str(t.logging_steps),
        "--include_tokens_per_second", "True",
        "--gradient_checkpointing", _bool(t.gradient_checkpointing),
        "--packing", _bool(t.packing),
        "--peft_method", t.peft.method,
        "--seed", str(t.seed),
    ]  # fmt: skip
    if t.peft.method == "lora":
        args += ["--r", str(t.peft.r), "--lora_alpha", str(t.peft.lora_alpha)]
        args += ["--target_modules", *(t.peft.target_modules or ())]
    if t.fp16:
        args += ["--fp16", "true"]
    if t.fast_kernels is not None:
        args += ["--fast_kernels", *(_bool(v).lower() for v in t.fast_kernels)]
    if t.fused_lora:
        args += ["--fused_lora", *t.fused_lora]
    if t.auto_gptq:
        args += ["--auto_gptq", *t.auto_gptq]
    if t.peft.method != "pt":
        args += [
            "--optim", t.optim,
            "--bf16", _bool(t.bf16),
            "--gradient_checkpointing_kwargs", json.dumps({"use_reentrant": t.gradient_checkpointing_use_reentrant}),
        ]  # fmt: skip
    if plan.use_cpu:
        args += ["--use_cpu", "True"]
    if not t.remove_unused_columns:
        args += ["--remove_unused_columns", "False"]
    if t.dataset_image_field:
        args += ["--dataset_image_field", t.dataset_image_field]
    if t.dataset_kwargs_skip_prepare_dataset:
        args += ["--dataset_kwargs", json.dumps({"skip_prepare_dataset": True})]
    # Seed: "--fast_moe is only supported for fms-hf-tuning v2.4.0+"; validation rejects fastMoe > 0 below it.
    if plan.engine_version and version_tuple(plan.engine_version) >= FAST_MOE_MIN_VERSION:
        args += ["--fast_moe", str(t.fast_moe)]
    _no_value_reads_as_flag(plan, dataset_path, model_path)
    return args


def _no_value_reads_as_flag(plan: LaunchPlan, dataset_path: str, model_path: str | None) -> None:
    """Free-text values (names, paths) follow their `--flag`; one starting with '-' (a LoRA target
    module "--max_steps") would be parsed as a flag of its own and change what is measured. The
    spec's patterns already refuse such values; this is the last line, next to the command line."""
    t = plan.training
    texts = [model_path or plan.model.ref, dataset_path, t.dataset_text_field, plan.output.dir]
    texts += [*(t.peft.target_modules or ()), *([t.dataset_image_field] if t.dataset_image_field else [])]
    for value in texts:
        if value.startswith("-"):
            raise ValueError(f"trainer argument value {value!r} starts with '-' and would be read as a flag")
