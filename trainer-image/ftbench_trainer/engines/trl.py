"""Current trl `SFTTrainer` with the seed's hyperparameters (the fms-hf-tuning command line's values).

Response masking: trl 1.x removed the response-template collator; rows are split at the
response template into `prompt` (up to and including the template) and `completion`, and
`completion_only_loss=True` trains on the completion only — the same tokens fms-hf-tuning's
template collator leaves unmasked. Prompt tuning uses fms-hf-tuning's defaults (8 virtual
tokens, TEXT init with its init text) so both engines train the same thing.
"""

from __future__ import annotations

from typing import Any

from ftbench.contracts.plan import DeepSpeedSettings, LaunchPlan
from ftbench_trainer.engines.run import EngineRun

# fms-hf-tuning's prompt-tuning init text (tuning/config/peft_config.py); the sizes come from the plan.
PT_INIT_TEXT = "Classify if the tweet is a complaint or not:"


def split_prompt_completion(text: str, template: str) -> dict[str, str]:
    """Split a row at its first response template; the template stays with the prompt."""
    cut = text.find(template)
    if cut < 0:
        raise ValueError(f"response template {template!r} not found in a dataset row")
    cut += len(template)
    return {"prompt": text[:cut], "completion": text[cut:]}


def peft_config(plan: LaunchPlan, model_path: str) -> Any:
    from peft import LoraConfig, PromptTuningConfig, PromptTuningInit, TaskType

    p = plan.training.peft
    if p.method == "lora":
        r, alpha, dropout = p.lora_shape()
        return LoraConfig(
            r=r,
            lora_alpha=alpha,
            target_modules=list(p.target_modules) if p.target_modules else None,
            lora_dropout=dropout,
            bias="none",
            task_type=TaskType.CAUSAL_LM,
        )
    if p.method == "pt":
        return PromptTuningConfig(
            task_type=TaskType.CAUSAL_LM,
            prompt_tuning_init=PromptTuningInit.TEXT,
            num_virtual_tokens=p.virtual_tokens(),
            prompt_tuning_init_text=PT_INIT_TEXT,
            tokenizer_name_or_path=model_path,
        )
    return None


def deepspeed_config(d: DeepSpeedSettings) -> dict[str, Any]:
    """The DeepSpeed config for transformers' Trainer: the plan's ZeRO stage and offload; batch sizes,
    accumulation, clipping and precision left "auto" so the Trainer fills them from its own arguments
    (one source for them)."""
    zero: dict[str, Any] = {"stage": d.zero_stage}
    if d.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if d.offload_parameters:
        zero["offload_param"] = {"device": "cpu"}
    auto = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size", "gradient_clipping")
    return {**dict.fromkeys(auto, "auto"), "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
            "zero_optimization": zero}  # fmt: skip


#: The plan's training fields that SFTConfig takes under the same name and as they are; the
#: arguments sft_config spells out are the ones it names or translates differently.
SFT_CONFIG_AS_PLANNED = (
    "gradient_accumulation_steps",
    "num_train_epochs",
    "max_steps",
    "learning_rate",
    "weight_decay",
    "lr_scheduler_type",
    "logging_steps",
    "gradient_checkpointing",
    "optim",
    "bf16",
    "fp16",
    "seed",
    "packing",
    "use_liger_kernel",
    "remove_unused_columns",
)


def sft_config(plan: LaunchPlan) -> Any:
    from trl import SFTConfig

    t = plan.training
    return SFTConfig(
        **{name: getattr(t, name) for name in SFT_CONFIG_AS_PLANNED},
        output_dir=plan.output.dir,
        per_device_train_batch_size=plan.topology.per_device_batch_size,
        # transformers 5 folded warmup_ratio into warmup_steps: a float in [0, 1) is a ratio.
        warmup_steps=t.warmup_ratio,
        gradient_checkpointing_kwargs={"use_reentrant": t.gradient_checkpointing_use_reentrant},
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        max_length=t.model_max_length,
        deepspeed=deepspeed_config(t.deepspeed) if t.deepspeed is not None else None,
        completion_only_loss=True,
        dataset_kwargs={"skip_prepare_dataset": True} if t.dataset_kwargs_skip_prepare_dataset else None,
        # Without use_cpu=True, a multi-process CPU run trains each process alone (see the CPU notes).
        use_cpu=plan.use_cpu,
    )


def build_trainer(run: EngineRun, callbacks: list[Any]) -> Any:
    """The SFTTrainer for `run` with `callbacks` (the benchmark builds one without ours)."""
    import torch
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    plan, t = run.plan, run.plan.training
    tokenizer = AutoTokenizer.from_pretrained(run.model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    fmt = "parquet" if run.dataset_path.endswith(".parquet") else "json"
    raw = load_dataset(fmt, data_files=run.dataset_path, split="train")
    dataset = raw.map(
        lambda row: split_prompt_completion(row[t.dataset_text_field], t.response_template),
        remove_columns=raw.column_names,
    )
    model = AutoModelForCausalLM.from_pretrained(
        run.model_path,
        dtype=getattr(torch, t.torch_dtype.value),
        attn_implementation=t.attn_implementation.value,
    )
    return SFTTrainer(
        model=model,
        args=sft_config(plan),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config(plan, run.model_path),
        callbacks=callbacks,
    )


def run_trl(run: EngineRun) -> str:
    import trl

    trainer = build_trainer(run, [run.callback])
    # Before train(): a set whose every row trl dropped fails in its sampler before any callback runs.
    run.callback.count_rows(trainer.train_dataset, trainer.data_collator)
    trainer.train()
    return trl.__version__
