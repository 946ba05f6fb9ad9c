"""spec + catalog + cluster profile -> LaunchPlan. Pure: no I/O, no clock, no randomness.

Every decision seed 001 describes is made here once: how the batch is split, which launcher runs
(the training module directly for <= 1 GPU, `accelerate launch` otherwise), the FSDP/DDP accelerate
config with the spec's values, the peft settings and the stop controls.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ftbench.api import effective
from ftbench.api.fabric import roce_warning
from ftbench.api.profile import ClusterProfile
from ftbench.api.runtime_choice import flash_attention_refusal
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog, ModelWeights
from ftbench.contracts.enums import (
    AttentionImplementation,
    DeepSpeedOffload,
    DistributedBackend,
    Engine,
    FsdpShardingStrategy,
    Runtime,
)
from ftbench.contracts.plan import (
    DatasetRef,
    DeepSpeedSettings,
    ExperimentRef,
    FsdpSettings,
    LaunchPlan,
    ModelRef,
    NetworkPreflightSettings,
    OutputSettings,
    PeftSettings,
    Rendezvous,
    RendezvousSource,
    StopSettings,
    Topology,
    TrainingSettings,
)
from ftbench.render.registry import RUNTIMES

# The network preflight's message sizes (nccl-tests' S) and time budget. GPUs: up to 128 MiB, where
# inter-node links approach their peak; CPU ranks (gloo, same code): up to 8 MiB, a few seconds.
PREFLIGHT_SIZES_GPU = (64 << 10, 1 << 20, 16 << 20, 128 << 20)
PREFLIGHT_SIZES_CPU = (64 << 10, 1 << 20, 8 << 20)
PREFLIGHT_BUDGET_GPU_SECONDS = 30.0
PREFLIGHT_BUDGET_CPU_SECONDS = 10.0


class PlanError(ValueError):
    """The spec passed validation but cannot be planned (e.g. the catalog changed under it)."""


def model_ref(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> ModelRef:
    exp = effective.experiment_of(spec, catalog)
    model = effective.model_of(spec, catalog)
    if model is None:
        raise PlanError(f"model {spec.model!r} is not in the catalog")
    ref = model.weights_for(exp.weights)
    if ref is None:
        raise PlanError(f"model {spec.model!r} has no {exp.weights} weights")
    if model.generated or not (ModelWeights.is_hub_id(ref) or ref.startswith("/")):
        ref = posixpath.normpath(posixpath.join(profile.storage.model_root, ref))
    return ModelRef(
        name=model.name,
        ref=ref,
        weights=exp.weights,
        generated=model.generated,
        layer_class=effective.fsdp_layer_classes(spec, catalog),
        num_local_experts=model.num_local_experts,
        architecture=model.architecture,
    )


def accelerate_config(
    spec: FineTuneExperimentSpec, catalog: Catalog, topology: Topology, port: int, use_cpu: bool
) -> dict[str, Any] | None:
    """Seed 001's FSDP or DDP accelerate config with `${...}` filled from the spec.

    machine_rank / main_process_ip are placeholders the trainer fills from the rendezvous env.
    On CPU the config keeps distributed_type MULTI_GPU with use_cpu false and the trainer sets
    TrainingArguments(use_cpu=True): accelerate starts one process per rank only that way
    (docs/measurements.md, "distributed mode").
    """
    backend = effective.distributed_backend(spec)
    if backend is None:
        return None
    common: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "downcast_bf16": "no",
        "machine_rank": 0,
        "main_training_function": "main",
        "mixed_precision": spec.accelerate_config_mixed_precision.value,
        "num_machines": topology.number_nodes,
        "rdzv_backend": "static",
        "same_network": True,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": False,
        "main_process_port": port,
        "num_processes": topology.world_size,
    }
    if backend in (DistributedBackend.DDP, DistributedBackend.DEEPSPEED):
        # DeepSpeed: accelerate starts the ranks as for DDP; the Trainer's deepspeed config (the plan's
        # training.deepspeed, ftbench_trainer.engines.trl) then makes accelerate wrap the model in ZeRO.
        return {"debug": False, "distributed_type": "MULTI_GPU", **common}
    fsdp: dict[str, Any] = {
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_offload_params": spec.fsdp_offload_params,
        "fsdp_state_dict_type": spec.fsdp_state_dict_type.value,
        # On CPU this fails with "no available devices found" (see the CPU notes).
        "fsdp_cpu_ram_efficient_loading": not use_cpu,
        "fsdp_activation_checkpointing": False,  # gradientCheckpointing goes through the Trainer
    }
    if effective.fsdp_version(spec) == 2:
        # FSDP2's only strategy knob: FULL_SHARD reshards after forward, SHARD_GRAD_OP keeps the
        # gathered parameters until backward (the rules refuse the strategies FSDP2 lacks).
        fsdp |= {
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": spec.fsdp_sharding_strategy == FsdpShardingStrategy.FULL_SHARD,
        }
    else:
        prefetch = effective.fsdp_backward_prefetch(spec)
        fsdp |= {  # FSDP1: accelerate's default version, so older accelerate releases read the same config
            "fsdp_sharding_strategy": spec.fsdp_sharding_strategy.value,
            "fsdp_backward_prefetch": prefetch.value if prefetch else "NO_PREFETCH",
            "fsdp_forward_prefetch": spec.fsdp_forward_prefetch,
            "fsdp_sync_module_states": not use_cpu,
            "fsdp_use_orig_params": spec.fsdp_use_orig_params,
        }
    layer_classes = effective.fsdp_layer_classes(spec, catalog)
    if layer_classes:
        # Without one (a model added by a model map), the trainer reads the model's own
        # `_no_split_modules` when it starts, as ado and accelerate fall back to.
        fsdp["fsdp_transformer_layer_cls_to_wrap"] = layer_classes
    return {"distributed_type": "FSDP", "fsdp_config": fsdp, **common}


def attention(spec: FineTuneExperimentSpec, profile: ClusterProfile, use_cpu: bool) -> AttentionImplementation:
    """spec.attentionImplementation resolved: auto is flash_attention_2 on GPUs where the images
    carry flash-attn (seed 001's use_flash_attn), else sdpa. flash_attention_2 on CPU is refused by
    validation (rule attention.flash-needs-gpu); on images without flash-attn it is refused here."""
    asked = spec.attention_implementation
    if asked == AttentionImplementation.AUTO:
        return (
            AttentionImplementation.FLASH_ATTENTION_2
            if not use_cpu and profile.flash_attention
            else AttentionImplementation.SDPA
        )
    if (refused := flash_attention_refusal(spec, profile)) is not None:
        raise PlanError(refused)
    return asked


def deepspeed_settings(spec: FineTuneExperimentSpec) -> DeepSpeedSettings | None:
    """DeepSpeed ZeRO when the run's backend is DeepSpeed (several ranks), else None."""
    if effective.distributed_backend(spec) != DistributedBackend.DEEPSPEED:
        return None
    offload = spec.deepspeed_offload
    return DeepSpeedSettings(
        zero_stage=spec.deepspeed_zero_stage,
        offload_optimizer=offload != DeepSpeedOffload.NONE,
        offload_parameters=offload == DeepSpeedOffload.OPTIMIZER_AND_PARAMETERS,
    )


def network_preflight(spec: FineTuneExperimentSpec) -> NetworkPreflightSettings | None:
    """The collective bandwidth self-test the ranks run before training, or None (effective.network_preflight)."""
    if not effective.network_preflight(spec):
        return None
    cpu = effective.uses_cpu(spec)
    return NetworkPreflightSettings(
        sizes_bytes=PREFLIGHT_SIZES_CPU if cpu else PREFLIGHT_SIZES_GPU,
        time_budget_seconds=PREFLIGHT_BUDGET_CPU_SECONDS if cpu else PREFLIGHT_BUDGET_GPU_SECONDS,
        require_roce=spec.run.require_roce,
        only=effective.network_check_only(spec),
    )


def _notes(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> tuple[str, ...]:
    notes = []
    if effective.network_check_only(spec):
        notes.append("run.networkPreflight only: the ranks run the network preflight and nothing else (no model is "
                     "loaded, nothing is trained)")  # fmt: skip
    if spec.enable_roce and spec.number_nodes == 1:
        notes.append("enableRoce is ignored: RoCE only applies to multi-node runs")
    if roce := roce_warning(spec, profile):
        notes.append(roce)
    if spec.distributed_backend == DistributedBackend.NONE and spec.number_gpus > 1:
        notes.append(f"distributedBackend None: one process drives {spec.number_gpus} GPUs with DataParallel")
    elif spec.distributed_backend not in (None, DistributedBackend.NONE) and effective.world_size(spec) == 1:
        notes.append(f"distributedBackend {spec.distributed_backend.value} is ignored: a single process runs")
    if spec.engine == Engine.TRL and "fmsHfTuningVersion" in {
        FineTuneExperimentSpec.model_fields[f].alias for f in spec.model_fields_set
    }:
        notes.append("fmsHfTuningVersion is ignored with engine trl")
    exp = effective.experiment_of(spec, catalog)
    if exp.max_steps is not None:
        notes.append(f"{exp.name.value} runs {exp.trials} trial(s) of {exp.max_steps} steps")
    if spec.number_gpus == 0:
        notes.append("numberGpus is 0: training runs on CPU and the GPU metrics do not apply (absent, n/a)")
    elif effective.uses_cpu(spec):
        notes.append(
            f"device cpu: {spec.number_gpus} CPU rank(s) (gloo) stand in for the GPUs; the GPU metrics do not apply (absent, n/a) and the "
            "figures are CPU figures"
        )
    return tuple(notes)


def build_plan(
    spec: FineTuneExperimentSpec,
    catalog: Catalog,
    profile: ClusterProfile,
    *,
    ref: ExperimentRef,
    runtime: Runtime,
    master_host: str = "127.0.0.1",
    output_dir: str = "/tmp/ftbench-output",
    dataset_entries: int | None = None,
    report_progress_to_kubernetes: bool = False,
    metrics_port: int | None = None,
) -> LaunchPlan:
    """Everything the trainer needs, resolved from the spec, the catalog and the profile: the trainer
    reads this plan and nothing else, so what ran is what the plan (in status, in the run folder) says."""
    exp = effective.experiment_of(spec, catalog)
    if spec.dataset_id not in catalog.datasets:
        raise PlanError(f"datasetId {spec.dataset_id!r} is not in the catalog")
    use_cpu = effective.uses_cpu(spec)
    layout = topology(spec)
    source: RendezvousSource = RUNTIMES[runtime].rendezvous if runtime in RUNTIMES else "local"
    if spec.number_nodes == 1:
        source, master_host = "local", "127.0.0.1"
    backend = effective.distributed_backend(spec)
    return LaunchPlan(
        experiment_ref=ref,
        experiment=spec.experiment,
        method=exp.method,
        engine=spec.engine,
        engine_version=spec.fms_hf_tuning_version if spec.engine == Engine.FMS_HF_TUNING else "",
        model=model_ref(spec, catalog, profile),
        dataset=DatasetRef(
            id=spec.dataset_id, generator=catalog.datasets[spec.dataset_id].generator(), entries=dataset_entries
        ),
        data_dir=profile.storage.data_dir,
        hf_home=profile.storage.hf_home,
        topology=layout,
        launcher="accelerate" if backend is not None else "direct",
        distributed_backend=backend,
        fsdp=fsdp_settings(spec, catalog),
        mixed_precision=spec.accelerate_config_mixed_precision.value,
        accelerate_config=accelerate_config(spec, catalog, layout, profile.master_port, use_cpu),
        rendezvous=Rendezvous(source=source, master_host=master_host, port=profile.master_port),
        training=training_settings(spec, catalog, profile),
        stop=StopSettings(
            stop_after_seconds=spec.stop_after_seconds,
            auto_stop_method=spec.auto_stop_method.value if spec.auto_stop_method else None,
            warmup_steps=spec.warmup_steps,
            target_precision=effective.precision_target(spec),
            precision_min_steps=spec.precision_min_steps,
            precision_min_seconds=spec.precision_min_seconds,
        ),
        trials=effective.trials(spec, catalog),
        use_cpu=use_cpu,
        network_preflight=network_preflight(spec),
        output=OutputSettings(
            dir=output_dir,
            result_file=posixpath.join(output_dir, "result.json"),
            report_progress_to_kubernetes=report_progress_to_kubernetes,
            metrics_port=metrics_port,
        ),
        notes=_notes(spec, catalog, profile),
    )


def topology(spec: FineTuneExperimentSpec) -> Topology:
    """Nodes, devices, processes and how the batch spreads over them."""
    return Topology(
        number_nodes=spec.number_nodes,
        number_gpus=0 if effective.uses_cpu(spec) else spec.number_gpus,
        gpus_per_node=effective.gpus_per_node(spec),
        processes_per_node=effective.processes_per_node(spec),
        world_size=effective.world_size(spec),
        batch_size=spec.batch_size,
        per_device_batch_size=effective.per_device_batch_size(spec),
    )


def training_settings(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> TrainingSettings:
    """What the engine trains with: the spec with every default resolved, and the experiment's fixed values."""
    exp = effective.experiment_of(spec, catalog)
    lora = exp.lora
    fixed = exp.fixed
    return TrainingSettings(
        torch_dtype=effective.torch_dtype(spec, catalog),
        model_max_length=spec.model_max_length,
        attn_implementation=attention(spec, profile, effective.uses_cpu(spec)),
        dataset_text_field=effective.dataset_text_field(spec),
        dataset_image_field=spec.dataset_image_field,
        num_train_epochs=spec.num_train_epochs,
        max_steps=effective.max_steps(spec, catalog),
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
        gradient_checkpointing=spec.gradient_checkpointing,
        gradient_checkpointing_use_reentrant=spec.gradient_checkpointing_use_reentrant,
        packing=spec.packing,
        use_liger_kernel=spec.liger_kernel,
        deepspeed=deepspeed_settings(spec),
        optim=spec.optim,
        bf16=spec.bf16,
        fp16=fixed.fp16,
        peft=PeftSettings(
            method=exp.peft_method,
            r=effective.lora_r(spec) if lora else None,
            lora_alpha=effective.lora_alpha(spec) if lora else None,
            target_modules=effective.target_modules(spec, catalog) if lora else None,
            lora_dropout=effective.DEFAULT_LORA_DROPOUT if lora else None,
            num_virtual_tokens=effective.DEFAULT_PT_VIRTUAL_TOKENS if exp.peft_method == "pt" else None,
        ),
        fast_moe=spec.fast_moe,
        # The user's fastKernels wins; an experiment's fixed value (GPTQ-LoRA: all on) is its default.
        fast_kernels=(
            tuple(spec.fast_kernels)  # type: ignore[arg-type]  # three flags: the spec's schema and the plan's check it
            if spec.fast_kernels is not None
            else fixed.fast_kernels
        ),
        fused_lora=fixed.fused_lora,
        auto_gptq=fixed.auto_gptq,
        remove_unused_columns=spec.remove_unused_columns,
        dataset_kwargs_skip_prepare_dataset=spec.dataset_kwargs_skip_prepare_dataset,
    )


def fsdp_settings(spec: FineTuneExperimentSpec, catalog: Catalog) -> FsdpSettings | None:
    """The FSDP the trainer must find on the wrapped model; None when the backend is not FSDP."""
    if effective.distributed_backend(spec) != DistributedBackend.FSDP:
        return None
    prefetch = effective.fsdp_backward_prefetch(spec)
    return FsdpSettings(
        version=effective.fsdp_version(spec),
        sharding_strategy=spec.fsdp_sharding_strategy.value,
        state_dict_type=spec.fsdp_state_dict_type.value,
        use_orig_params=spec.fsdp_use_orig_params,
        layer_classes=effective.fsdp_layer_classes(spec, catalog),
        offload_params=spec.fsdp_offload_params,
        forward_prefetch=spec.fsdp_forward_prefetch,
        backward_prefetch=prefetch.value if prefetch else None,
    )
