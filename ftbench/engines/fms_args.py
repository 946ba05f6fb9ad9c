"""The `tuning.sft_trainer` command line of seed 001 for one fms-hf-tuning release, from a LaunchPlan.

The trainer runs exactly these arguments, and tests feed them to each release's own parser. A
flag goes on the line only if that release's parser knows it (`ftbench.engines.flags`, read from
the releases): the ones every release has always; the optional ones only when the plan asks for
what they do. A plan asking for something its release has no flag for is refused here
(`UnsupportedByRelease`), and earlier by validation, which reads the same data.
"""

from __future__ import annotations

import json
import shlex

from ftbench.contracts.enums import AttentionImplementation
from ftbench.contracts.plan import LaunchPlan
from ftbench.engines.flags import known_flags


class UnsupportedByRelease(ValueError):
    """The plan needs a flag the release's parser does not have."""


def _bool(value: bool) -> str:
    return "True" if value else "False"


def _core(plan: LaunchPlan, dataset_path: str, model_path: str | None) -> list[tuple[str, list[str]]]:
    t = plan.training
    return [
        ("--model_name_or_path", [model_path or plan.model.ref]),
        ("--torch_dtype", [t.torch_dtype.value]),
        # sdpa is what the releases load without flash (transformers' default); eager goes through
        # --flash_attn_implementation, which only takes effect with --use_flash_attn True.
        ("--use_flash_attn", [_bool(t.attn_implementation != AttentionImplementation.SDPA)]),
        ("--training_data_path", [dataset_path]),
        ("--response_template", [t.response_template]),
        ("--dataset_text_field", [t.dataset_text_field]),
        ("--log_level", ["debug"]),
        ("--num_train_epochs", [repr(float(t.num_train_epochs))]),
        ("--max_steps", [str(t.max_steps)]),
        ("--per_device_train_batch_size", [str(plan.topology.per_device_batch_size)]),
        ("--max_seq_length", [str(t.model_max_length)]),
        ("--eval_strategy", ["no"]),
        ("--output_dir", [plan.output.dir]),
        ("--gradient_accumulation_steps", [str(t.gradient_accumulation_steps)]),
        ("--save_strategy", ["no"]),
        ("--learning_rate", [repr(t.learning_rate)]),
        ("--weight_decay", [repr(t.weight_decay)]),
        ("--warmup_ratio", [repr(t.warmup_ratio)]),
        ("--lr_scheduler_type", [t.lr_scheduler_type]),
        ("--logging_steps", [str(t.logging_steps)]),
        ("--include_tokens_per_second", ["True"]),
        ("--gradient_checkpointing", [_bool(t.gradient_checkpointing)]),
        ("--packing", [_bool(t.packing)]),
        ("--peft_method", [t.peft.method]),
        ("--seed", [str(t.seed)]),
        ("--optim", [t.optim]),
        ("--bf16", [_bool(t.bf16)]),
        ("--gradient_checkpointing_kwargs", [json.dumps({"use_reentrant": t.gradient_checkpointing_use_reentrant})]),
    ]


def _optional(plan: LaunchPlan) -> list[tuple[str, list[str]]]:
    """Flags only for what the plan asks; absent, each release's default is what the seed runs."""
    t = plan.training
    out: list[tuple[str, list[str]]] = []
    if t.peft.method == "lora":
        out += [("--r", [str(t.peft.r)]), ("--lora_alpha", [str(t.peft.lora_alpha)])]
        out.append(("--target_modules", list(t.peft.target_modules or ())))
    if t.fp16:
        out.append(("--fp16", ["true"]))
    if t.fast_kernels is not None:
        out.append(("--fast_kernels", [_bool(v).lower() for v in t.fast_kernels]))
    if t.fused_lora:
        out.append(("--fused_lora", list(t.fused_lora)))
    if t.auto_gptq:
        out.append(("--auto_gptq", list(t.auto_gptq)))
    if t.attn_implementation == AttentionImplementation.EAGER:
        out.append(("--flash_attn_implementation", ["eager"]))
    if plan.use_cpu:
        out.append(("--use_cpu", ["True"]))
    if not t.remove_unused_columns:
        out.append(("--remove_unused_columns", ["False"]))
    if t.dataset_image_field:
        out.append(("--dataset_image_field", [t.dataset_image_field]))
    if t.dataset_kwargs_skip_prepare_dataset:
        out.append(("--dataset_kwargs", [json.dumps({"skip_prepare_dataset": True})]))
    # `--fast_moe 0` is not "off": releases parse it into a FastMoeConfig that turns ScatterMoE on.
    if t.fast_moe > 0:
        out.append(("--fast_moe", [str(t.fast_moe)]))
    return out


def sft_trainer_args(plan: LaunchPlan, *, dataset_path: str, model_path: str | None = None) -> list[str]:
    """dataset_path: the file the trainer resolved (generated or plan.dataset.path)."""
    release = plan.engine_version
    known = known_flags(release)
    args: list[str] = []
    for flag, values in _core(plan, dataset_path, model_path) + _optional(plan):
        if flag not in known:
            raise UnsupportedByRelease(
                f"fms-hf-tuning {release or '(none)'} has no {flag} (its parser does not know it); "
                "choose another fmsHfTuningVersion or leave the setting that needs it unset"
            )
        args.append(flag)
        args.extend(values)
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


def equivalent_command(plan: LaunchPlan, args: list[str], accelerate_config: str | None) -> str:
    """The bare fms-hf-tuning command that trains the same way, for anyone to reproduce the run."""
    if accelerate_config:
        head = ["accelerate", "launch", "--config_file", accelerate_config, "-m", "tuning.sft_trainer"]
    else:
        head = ["python", "-m", "tuning.sft_trainer"]
    return shlex.join(head + args)
