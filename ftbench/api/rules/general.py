"""Cross-field rules: one list, checked in Python by the CLI and the operator, and emitted as CEL
`x-kubernetes-validations` into the CRD so current API servers reject the same specs at apply time.

A rule's Python check and CEL expression must agree; tests/unit/test_rules_cel.py evaluates both
on generated specs. Rules that need the catalog (which users can extend) have no CEL twin. This
module holds the seed's and the general rules and gathers every family (this folder's other modules) into one list.
"""

from __future__ import annotations

from collections.abc import Iterator

from ftbench.api import effective
from ftbench.api.rules.applied import applied_rules
from ftbench.api.rules.bounds import bound_rules
from ftbench.api.rules.data import data_rules
from ftbench.api.rules.distributed import distributed_rules
from ftbench.api.rules.engines import engine_rules
from ftbench.api.rules.experiments import experiment_rules
from ftbench.api.rules.modules import module_rules, suggested_targets, target_names
from ftbench.api.rules.options import option_rules
from ftbench.api.rules.rule import Rule, RuleFamily, cel_list
from ftbench.api.rules.runtime import runtime_rules
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import DistributedBackend, Engine
from ftbench.engines.flags import releases_reading_images


def _seed_rules() -> Iterator[Rule]:
    family = RuleFamily()

    @family.rule(
        "is_valid.1",
        "batchSize",
        "batchSize must be divisible by max(1, numberGpus)",
        cel="self.batchSize % (self.numberGpus > 0 ? self.numberGpus : 1) == 0",
    )
    def divisible_batch(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        devices = max(1, s.number_gpus)
        if s.batch_size % devices == 0:
            return None
        return (
            f"batchSize {s.batch_size} is not divisible by numberGpus {s.number_gpus}; "
            f"use a multiple of {devices}, e.g. {devices * max(1, s.batch_size // devices)}"
        )

    @family.rule(
        "is_valid.2",
        "numberGpus",
        "numberGpus must be divisible by numberNodes",
        cel="self.numberGpus % self.numberNodes == 0",
    )
    def divisible_gpus(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.number_gpus % s.number_nodes == 0:
            return None
        return (
            f"numberGpus {s.number_gpus} cannot be spread evenly over numberNodes {s.number_nodes}; "
            f"use a multiple of {s.number_nodes} GPUs or fewer nodes"
        )

    @family.rule(
        "is_valid.5",
        "gpuModel",
        "gpuModel must be set when numberGpus > 0 (and device is not cpu)",
        cel="self.numberGpus == 0 || (has(self.device) && self.device == 'cpu') || (has(self.gpuModel) && size(self.gpuModel) > 0)",
    )
    def gpu_model_set(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.number_gpus == 0 or s.gpu_model or effective.uses_cpu(s):
            return None
        return (
            f"gpuModel is empty but numberGpus is {s.number_gpus}; set it to the GPU product label of the "
            "nodes to run on, e.g. NVIDIA-A100-SXM4-80GB (kubectl get nodes -L nvidia.com/gpu.product)"
        )

    @family.rule(
        "is_valid.6",
        "fastMoe",
        "numberGpus must be divisible by fastMoe",
        cel="self.fastMoe == 0 || self.numberGpus % self.fastMoe == 0",
    )
    def fast_moe_gpus(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.fast_moe == 0 or s.number_gpus % s.fast_moe == 0:
            return None
        return f"numberGpus {s.number_gpus} is not divisible by fastMoe {s.fast_moe}; use a divisor of numberGpus"

    @family.rule("is_valid.7", "fastMoe", "the model's num_local_experts must be divisible by fastMoe")
    def fast_moe_experts(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        if s.fast_moe == 0:
            return None
        model = effective.model_of(s, c)
        experts = model.num_local_experts if model else None
        if experts is None:
            return (
                f"fastMoe {s.fast_moe} needs a Mixture-of-Experts model, but {s.model} has no "
                "num_local_experts in the catalog; set fastMoe to 0"
            )
        if experts % s.fast_moe:
            return (
                f"model {s.model} has {experts} experts, not divisible by fastMoe {s.fast_moe}; "
                f"use a divisor of {experts}"
            )
        return None

    yield from family.rules


def _general_rules(catalog: Catalog) -> Iterator[Rule]:
    family = RuleFamily()

    @family.rule("steps.nonzero", "maxSteps", "maxSteps is -1 or at least 1", cel="self.maxSteps != 0")
    def max_steps_nonzero(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        # transformers (and so ado, which passes 0 on) reads max_steps <= 0 as "run num_train_epochs";
        # a reader of the spec may expect no training. The seed's way to ask for epochs is -1.
        if s.max_steps != 0:
            return None
        return "maxSteps 0 is ambiguous (transformers would run numTrainEpochs); use -1 to run numTrainEpochs, or >= 1"

    @family.rule(
        "steps.warmup",
        "warmupSteps",
        "warmupSteps is below maxSteps, so some steps are measured",
        cel="!has(self.warmupSteps) || self.maxSteps < 1 || self.warmupSteps < self.maxSteps",
    )
    def warmup_below_steps(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.warmup_steps is None or s.max_steps < 1 or s.warmup_steps < s.max_steps:
            return None
        return (
            f"warmupSteps {s.warmup_steps} leaves no measured step of maxSteps {s.max_steps}; "
            f"use at most {s.max_steps - 1}, or raise maxSteps"
        )

    @family.rule("steps.warmup-epochs", "warmupSteps", "an epoch-based run has steps left after warmupSteps")
    def warmup_within_epochs(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        dataset = c.datasets.get(s.dataset_id)
        if s.warmup_steps is None or effective.max_steps(s, c) >= 1 or dataset is None:
            return None
        # At most every entry trains (fewer when rows are dropped): transformers' step count for the epochs.
        batch = effective.global_batch_size(s)
        per_epoch = -(-dataset.entries // batch)
        steps = -(-int(per_epoch * s.num_train_epochs * 1000) // 1000)  # ceil, robust to float epochs
        if s.warmup_steps < steps:
            return None
        return (
            f"warmupSteps {s.warmup_steps} leaves no measured step: {s.num_train_epochs:g} epoch(s) of {s.dataset_id} "
            f"are at most {steps} optimizer steps ({dataset.entries} entries / {batch} samples per step), so the steady "
            f"window would be empty; use warmupSteps below {steps}, or raise numTrainEpochs"
        )

    @family.rule(
        "stop.precision-steps",
        "precisionMinSteps",
        "a precision target can end the run before maxSteps",
        cel="!has(self.targetPrecisionPercent) || self.maxSteps < 1 || "
        "(has(self.warmupSteps) ? self.warmupSteps : 0) + self.precisionMinSteps < self.maxSteps",
    )
    def precision_before_max_steps(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        warmup = s.warmup_steps or 0
        if s.target_precision_percent is None or s.max_steps < 1 or warmup + s.precision_min_steps < s.max_steps:
            return None
        return (
            f"targetPrecisionPercent could never stop the run: maxSteps {s.max_steps} ends it before the "
            f"{warmup} warmup and {s.precision_min_steps} minimum steady steps (precisionMinSteps) are done; "
            f"raise maxSteps above {warmup + s.precision_min_steps}, lower precisionMinSteps, or drop the target"
        )

    @family.rule(
        "stop.precision-seconds",
        "precisionMinSeconds",
        "a precision target can end the run before stopAfterSeconds",
        cel="!has(self.targetPrecisionPercent) || self.stopAfterSeconds <= 0 || "
        "self.precisionMinSeconds < self.stopAfterSeconds",
    )
    def precision_before_time(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.target_precision_percent is None or s.stop_after_seconds <= 0:
            return None
        if s.precision_min_seconds < s.stop_after_seconds:
            return None
        return (
            f"targetPrecisionPercent could never stop the run: stopAfterSeconds {s.stop_after_seconds:g} ends it "
            f"before precisionMinSeconds {s.precision_min_seconds:g} of steady steps; raise stopAfterSeconds, lower "
            "precisionMinSeconds, or drop the target"
        )

    @family.rule(
        "repeats.one-node",
        "repeats",
        "repeats run on one node",
        cel="!has(self.repeats) || self.repeats == 1 || self.numberNodes == 1",
    )
    def repeats_one_node(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if (s.repeats or 1) == 1 or s.number_nodes == 1:
            return None
        return (
            f"repeats {s.repeats} run one after another on one node, but numberNodes is {s.number_nodes}; "
            "use a FineTuneSweep with repeats for multi-node runs, or numberNodes 1"
        )

    # Seed rule 1 spreads the batch over max(1, numberGpus) devices; a multi-node CPU run (an
    # ftbench extension: ado refuses 0 GPUs on several nodes) has one process per node instead, so
    # the batch must split over the nodes or the effective batch would silently change.
    @family.rule(
        "batch.cpu-nodes",
        "batchSize",
        "without GPUs, batchSize must be divisible by numberNodes (one process per node)",
        cel="self.numberGpus > 0 || self.batchSize % self.numberNodes == 0",
    )
    def cpu_batch_per_node(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.number_gpus > 0 or s.batch_size % s.number_nodes == 0:
            return None
        return (
            f"batchSize {s.batch_size} cannot be split over the {s.number_nodes} CPU processes of a run on "
            f"{s.number_nodes} nodes without GPUs; use a multiple of {s.number_nodes} or numberNodes 1"
        )

    @family.rule(
        "backend.none-single-node",
        "distributedBackend",
        "distributedBackend None (DataParallel) runs on one node",
        cel="!has(self.distributedBackend) || self.distributedBackend != 'None' || self.numberNodes == 1",
    )
    def data_parallel_one_node(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.distributed_backend != DistributedBackend.NONE or s.number_nodes == 1:
            return None
        return (
            f"distributedBackend None is one DataParallel process on one node, but numberNodes is "
            f"{s.number_nodes}; set numberNodes 1 or distributedBackend FSDP or DDP"
        )

    vision = sorted(d.name for d in catalog.datasets.values() if d.kind == "vision")
    image_ok = releases_reading_images()

    @family.rule(
        "engine.trl-text-only",
        "datasetId",
        "engine trl runs text datasets only",
        cel="self.engine != 'trl' || !(self.datasetId in " + cel_list(vision) + ")",
    )
    def trl_text_only(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.engine != Engine.TRL or s.dataset_id not in vision:
            return None
        release = (
            ""  # the release the spec names reads image datasets: switching the engine is enough
            if s.fms_hf_tuning_version in image_ok
            else f" with fmsHfTuningVersion {' or '.join(image_ok)} (the releases whose parser has --dataset_image_field)"
        )
        return (
            f"engine trl runs text datasets only; {s.dataset_id} is a vision (chat + image) dataset, which "
            f"ftbench runs through fms-hf-tuning: set engine fms-hf-tuning{release}, or a news-* dataset"
        )

    @family.rule(
        "engine.trl-acceleration",
        "engine",
        "fastMoe and fastKernels need engine fms-hf-tuning",
        cel="self.engine != 'trl' || (self.fastMoe == 0 && !has(self.fastKernels))",
    )
    def trl_acceleration(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.engine != Engine.TRL or (s.fast_moe == 0 and s.fast_kernels is None):
            return None
        return (
            "fastMoe and fastKernels are fms-acceleration plugins, which engine trl does not have; "
            "use engine fms-hf-tuning or remove them"
        )

    @family.rule("catalog.model", "model", "the model is in the catalog with the weights the experiment loads")
    def model_known(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        exp = effective.experiment_of(s, c)
        model = effective.model_of(s, c)
        if model is None:
            return (
                f"model {s.model!r} is not in the model catalog; pick one from `ftbench catalog models` "
                "or add it with a model map"
            )
        if model.weights_for(exp.weights) is None:
            what = "GPTQ pre-quantized" if exp.weights == "gptq" else "full-precision"
            return (
                f"model {s.model} has no {what} weights in the catalog, which {exp.name} needs; add them "
                f"with a model map ({'GPTQ-Quantized' if exp.weights == 'gptq' else 'Vanilla'}: <id or path>)"
            )
        return None

    @family.rule("catalog.dataset", "datasetId", "the dataset is in the catalog and matches the model")
    def dataset_known(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        dataset = c.datasets.get(s.dataset_id)
        if dataset is None:
            return f"datasetId {s.dataset_id!r} is unknown; use one of {', '.join(sorted(c.datasets))}"
        model = effective.model_of(s, c)
        if model is not None and (dataset.kind == "vision") != model.vision:
            kind = "a vision" if dataset.kind == "vision" else "a text"
            return f"datasetId {s.dataset_id} is {kind} dataset but model {s.model} is not; pick a matching pair"
        return None

    @family.rule("catalog.lora-targets", "targetModules", "LoRA needs target modules")
    def lora_targets(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        if not effective.experiment_of(s, c).lora or effective.target_modules(s, c):
            return None
        names = target_names(s, c)
        if not names:
            return f"the catalog has no LoRA target modules for {s.model}; set targetModules to the names of its linear modules"
        return (
            f"the catalog has no LoRA target modules for {s.model}; set targetModules, e.g. "
            f"[{', '.join(suggested_targets(names))}] (its modules: {', '.join(names)})"
        )

    yield from family.rules


def all_rules(catalog: Catalog) -> list[Rule]:
    rules = [*_seed_rules(), *_general_rules(catalog), *engine_rules(catalog), *distributed_rules()]
    rules += [*bound_rules(), *data_rules(), *applied_rules(), *option_rules(), *runtime_rules(catalog)]
    rules += [*module_rules()]
    for exp in catalog.experiments.values():
        rules.extend(experiment_rules(exp))
    return rules
