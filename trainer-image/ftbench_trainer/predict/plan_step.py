"""Read a launch plan as a traced step (`StepShape`) and a sharding: the predictor's inputs."""

from __future__ import annotations

from ftbench.contracts.enums import DistributedBackend
from ftbench.contracts.plan import LaunchPlan
from ftbench_trainer.predict.shard import Sharding
from ftbench_trainer.predict.stack import stack
from ftbench_trainer.predict.step import StepShape

MIXED = {"bf16": "bfloat16", "fp16": "float16"}
SIXTEEN_BIT = ("bfloat16", "float16")
# With mixed precision on, accelerate upcasts FSDP1's trained flat parameters of a 16-bit model to float32
# (`Accelerator.prepare_model`: `if self.mixed_precision != "no"`, accelerate 1.0.1 to 1.11, every offered
# fms-hf-tuning release's): parameters, gradients and AdamW moments of what trains take twice the bytes.
# Without it (ado's default and ftbench's) they keep the load dtype: results.rankMemory of a two-rank
# fms-hf-tuning 2.4.0 run on CPU, and ado's fleet (docs/benchmarks.md, "ado's fleet").
FSDP1_MIXED_MASTER_FACTOR = 2.0
# FlashAttention kernels do not exist on CPU; torch's memory-efficient sdpa kernel keeps the same
# O(seq) state (output plus log-sum-exp), so it stands in for them in the trace (see `traced_attention`).
FLASH = ("flash_attention_2", "flash_attention_3")


def traced_attention(attention: str) -> str:
    return "sdpa" if attention in FLASH else attention


def step_shape(plan: LaunchPlan) -> StepShape:
    t = plan.training
    dtype = str(t.torch_dtype)
    autocast = "bfloat16" if t.bf16 else "float16" if t.fp16 else MIXED.get(plan.mixed_precision)
    peft = t.peft
    method = plan.method
    engine = stack()
    # A LoRA plan always carries its shape; StepShape's own defaults only stand in for other methods.
    lora_r, lora_alpha, lora_dropout = (
        peft.lora_shape() if peft.method == "lora" else (StepShape.lora_r, StepShape.lora_alpha, StepShape.lora_dropout)
    )
    return StepShape(
        method=method,
        # GPTQ-LoRA's quantized base layers compute in float16; the trace sees them as float16 linears.
        dtype="float16" if method == "gptq-lora" else dtype,
        autocast=None if autocast == dtype else autocast,
        attention=traced_attention(str(t.attn_implementation)),
        checkpointing=t.gradient_checkpointing,
        batch=plan.topology.per_device_batch_size,
        # The worst batch: every row padded (or packed) to modelMaxLength.
        seq=t.model_max_length,
        device="cpu" if plan.use_cpu else "cuda",
        gradient_accumulation=t.gradient_accumulation_steps,
        no_sync=t.gradient_accumulation_steps > 1 and engine.fsdp2_no_sync,
        lora_r=lora_r,
        lora_alpha=lora_alpha,
        lora_dropout=lora_dropout,
        lora_targets=peft.target_modules,
        pt_virtual_tokens=peft.virtual_tokens() if peft.method == "pt" else StepShape.pt_virtual_tokens,
        fused_lm_head=engine.fused_lm_head,
        logits_accuracy=engine.logits_accuracy,
    )


def sharding(plan: LaunchPlan) -> Sharding:
    topo = plan.topology
    backend = plan.distributed_backend
    if topo.world_size == 1 or backend in (None, DistributedBackend.NONE):
        return Sharding("none")
    if backend == DistributedBackend.DDP:
        return Sharding("ddp", topo.world_size)
    if backend == DistributedBackend.DEEPSPEED and plan.training.deepspeed is not None:
        ds = plan.training.deepspeed
        return Sharding(
            f"zero{ds.zero_stage}",
            topo.world_size,
            offload_parameters=ds.offload_parameters,
            offload_optimizer=ds.offload_optimizer or ds.offload_parameters,
        )
    fsdp = plan.fsdp
    if fsdp is None:
        return Sharding("none")
    hybrid = fsdp.sharding_strategy.startswith("HYBRID")
    fsdp1 = fsdp.version == 1
    return Sharding(
        fsdp.sharding_strategy,
        topo.processes_per_node if hybrid else topo.world_size,
        forward_prefetch=fsdp.forward_prefetch,
        offload_parameters=fsdp.offload_params,
        offload_optimizer=fsdp.offload_params,
        master_factor=FSDP1_MIXED_MASTER_FACTOR if fsdp1 and mixed_precision(plan) else 1.0,
        fsdp1=fsdp1,
        flat_parameters=fsdp1 and not fsdp.use_orig_params,
        expert_parallel=plan.training.fast_moe,
        no_sync=plan.training.gradient_accumulation_steps > 1,
    )


def mixed_precision(plan: LaunchPlan) -> bool:
    """Whether accelerate runs this 16-bit model with mixed precision on (its launch config, or the trainer's
    bf16/fp16 arguments, which transformers passes to accelerate): what makes it upcast FSDP1's weights."""
    t = plan.training
    return (t.bf16 or t.fp16 or plan.mixed_precision != "no") and str(t.torch_dtype) in SIXTEEN_BIT
