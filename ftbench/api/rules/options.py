"""Rules of seed 003's speed and memory options (packing, and what each can run with).

An option is offered only where a test shows it in effect; where it cannot be shown (or would
change what is trained), the spec is refused here with the reason instead of measuring something
else than it says.
"""

from __future__ import annotations

from collections.abc import Iterator

from ftbench.api import effective
from ftbench.api.rules.rule import Rule, RuleFamily
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import DeepSpeedOffload, DistributedBackend, Engine


def option_rules() -> Iterator[Rule]:
    family = RuleFamily()

    @family.rule(
        "packing.engine",
        "packing",
        "packing runs with engine trl",
        cel="!has(self.packing) || !self.packing || self.engine == 'trl'",
    )
    def packing_engine(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if not s.packing or s.engine == Engine.TRL:
            return None
        return (
            "packing with engine fms-hf-tuning is not offered: ftbench has not shown its --packing (its own trl "
            "and transformers releases) keeping packed samples from attending to each other; use engine trl, "
            "whose packing is tested to train each packed sample as it would alone"
        )

    @family.rule("packing.prompt-tuning", "packing", "packing does not run with prompt tuning")
    def packing_prompt_tuning(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        if not s.packing or effective.experiment_of(s, c).peft_method != "pt":
            return None
        return (
            "packing with prompt tuning is not offered: the virtual tokens are prepended once per packed row, "
            "not per sample, so the samples would be trained without their prompt; set packing to false"
        )

    @family.rule(
        "liger.gpu-trl",
        "ligerKernel",
        "Liger kernels need GPUs and engine trl",
        cel="!has(self.ligerKernel) || !self.ligerKernel || (self.engine == 'trl' && self.numberGpus > 0 && "
        "(!has(self.device) || self.device != 'cpu'))",
    )
    def liger(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if not s.liger_kernel:
            return None
        if effective.uses_cpu(s):
            return (
                "ligerKernel runs Liger's Triton kernels, which need a GPU, but this experiment trains on CPU "
                "(numberGpus 0 or device cpu); set ligerKernel to false, or run on GPUs"
            )
        if s.engine != Engine.TRL:
            return (
                "ligerKernel is not offered with engine fms-hf-tuning: each release pins its transformers, and no "
                "liger-kernel release was checked against those pins; use engine trl (its image installs liger-kernel)"
            )
        return None

    @family.rule("deepspeed.settings", "distributedBackend", "DeepSpeed settings need DeepSpeed and engine trl")
    def deepspeed(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        backend = effective.distributed_backend(s)
        asked = s.deepspeed_zero_stage != 2 or s.deepspeed_offload != DeepSpeedOffload.NONE
        if backend != DistributedBackend.DEEPSPEED:
            if not asked:
                return None
            runs = backend.value if backend is not None else "one process"
            return (
                f"deepspeedZeroStage and deepspeedOffload configure DeepSpeed, but this run uses {runs}, so they would "
                "not be applied; remove them, or set distributedBackend DeepSpeed (with more than one rank)"
            )
        if s.engine != Engine.TRL:
            return (
                "distributedBackend DeepSpeed is not offered with engine fms-hf-tuning: the releases' locks do not "
                "install deepspeed; use engine trl (its environment and image have deepspeed)"
            )
        if s.deepspeed_offload == DeepSpeedOffload.OPTIMIZER_AND_PARAMETERS and s.deepspeed_zero_stage != 3:
            return (
                "deepspeedOffload optimizerAndParameters offloads parameters, which only ZeRO stage 3 partitions; "
                "set deepspeedZeroStage 3, or deepspeedOffload optimizer"
            )
        return None

    yield from family.rules
