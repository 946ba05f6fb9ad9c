"""fms-hf-tuning: `tuning.sft_trainer.train` with seed 001's exact command line and our callback.

The arguments are `ftbench.contracts.fms_args.sft_trainer_args(plan)` — the command line the seed
runs — parsed by fms-hf-tuning's own parser, so nothing is re-interpreted here. The callback goes
in through `train(additional_callbacks=...)`, the extension point fms-hf-tuning offers. Runs only
in the fms-hf-tuning environment (its pins exclude current transformers/trl).
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from typing import Any

from ftbench.contracts.fms_args import sft_trainer_args
from ftbench_trainer.engines import EngineRun


def parse(args: list[str]) -> tuple:
    """fms-hf-tuning's `parse_arguments` over `args` (it reads sys.argv, so swap it briefly)."""
    from tuning import sft_trainer

    saved = sys.argv
    sys.argv = ["sft_trainer", *args]
    try:
        return sft_trainer.parse_arguments(sft_trainer.get_parser())
    finally:
        sys.argv = saved


def run_fms(run: EngineRun) -> str:
    train_fms(run, [run.callback])
    return version("fms-hf-tuning")


def train_fms(run: EngineRun, callbacks: list[Any]) -> Any:
    """`tuning.sft_trainer.train` on the seed's arguments with `callbacks`; returns the trainer."""
    from tuning import sft_trainer

    args = sft_trainer_args(run.plan, dataset_path=run.dataset_path, model_path=run.model_path)
    (
        model_args,
        data_args,
        training_args,
        trainer_controller_args,
        tune_config,
        quantization_config,
        quantized_lora_config,
        fusedops_kernels_config,
        attention_and_distributed_packing_config,
        fast_moe_config,
        tracker_configs,
        _exp_metadata,
    ) = parse(args)
    trainer, _info, _tc = sft_trainer.train(
        model_args=model_args,
        data_args=data_args,
        train_args=training_args,
        peft_config=tune_config,
        quantization_config=quantization_config,
        trainer_controller_args=trainer_controller_args,
        tracker_configs=tracker_configs,
        additional_callbacks=callbacks or None,
        quantized_lora_config=quantized_lora_config,
        fusedops_kernels_config=fusedops_kernels_config,
        attention_and_distributed_packing_config=attention_and_distributed_packing_config,
        fast_moe_config=fast_moe_config,
    )
    return trainer
