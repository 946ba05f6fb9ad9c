"""Peer conformance (c): ado's validation and ftbench's rules agree on generated specs.

Hypothesis draws ado entities (ado's property names) around both sides' boundaries; ado judges
them with its own code (tests/peer/ado_validate.py, run once inside the ado environment for all of
them) and ftbench with `validate_spec_dict` on the same parameters under ftbench's names. The
verdicts must be equal, except where a deliberate difference in `DIFFERENCES` explains it: the
side it names refuses, for the reason it names (ftbench's rule ids, ado's message), on a case its
predicate holds for. Each difference carries a witness that must still disagree that way, so the
list cannot outlive the differences; docs/measurements.md ("Validation: where ftbench and ado
differ") documents the same list.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import ValidationReport, validate_spec_dict
from ftbench.catalog import Catalog, load_catalog
from ftbench.catalog.loader import DatasetEntry
from ftbench.contracts.ado_names import ADO_PARAMETERS
from ftbench.contracts.enums import (
    EXPERIMENT_ALIASES,
    Experiment,
    canonical_experiment,
)
from ftbench.engines.flags import releases_knowing
from ftbench.engines.optimizers import why_not
from ftbench.engines.releases import DEFAULT_FMS_HF_TUNING_VERSION, FMS_HF_TUNING_VERSIONS, load_releases

pytestmark = pytest.mark.peer

EXAMPLES = 300
DRIVER = Path(__file__).with_name("ado_validate.py")
DOCS = Path(__file__).parents[2] / "docs" / "measurements.md"
DOCS_SECTION = "## Validation: where ftbench and ado differ"
Entity = dict[str, Any]
Move = Callable[[st.DrawFn, str, Entity], Entity]
Verdict = dict[str, Any]  # the driver's {"valid", "stage", "reason"}

FULL, STABILITY, LORA, PT = (
    e.value for e in (Experiment.FULL, Experiment.FULL_STABILITY, Experiment.LORA, Experiment.PROMPT_TUNING)
)
#: An entity both sides run, for every experiment; witnesses change a parameter or two of it.
RUNNABLE: Entity = {
    "model_name": "llama-7b",
    "model_max_length": 512,
    "number_gpus": 2,
    "batch_size": 4,
    "gpu_model": "NVIDIA-A100-SXM4-80GB",
}


@dataclass(frozen=True)
class Ado:
    """ado's property domains per experiment and the models its LoRA experiments have target
    modules for, as its driver reports them."""

    domains: dict[str, dict[str, dict[str, list[Any]]]]
    lora_models: dict[str, list[str]]

    def allows(self, experiment: str, prop: str, value: Any) -> bool:
        domain = self.domains[experiment].get(prop)
        if domain is None:
            return True  # not a property of the experiment: ado ignores it
        if "values" in domain:
            return value in domain["values"]
        low, high = domain["range"]
        return bool(low <= value < high)


@dataclass(frozen=True)
class Case:
    """One entity (ado's names) for one experiment (ado's id), with what the predicates read."""

    experiment: str
    entity: Entity
    ado: Ado
    catalog: Catalog
    moved: tuple[str, ...] = ()  # what the strategy moved off a runnable entity, for messages

    def get(self, prop: str, default: Any = None) -> Any:
        return self.entity.get(prop, default)

    @property
    def gpus(self) -> int:
        return int(self.entity["number_gpus"])

    @property
    def release(self) -> str:
        return str(self.entity.get("fms_hf_tuning_version", DEFAULT_FMS_HF_TUNING_VERSION))

    def outside_ado(self, prop: str) -> bool:
        return prop in self.entity and not self.ado.allows(self.experiment, prop, self.entity[prop])


@dataclass(frozen=True)
class Difference:
    """A deliberate difference. `refused_by` refuses what `applies` holds for and the other side
    accepts; `evidence` matches the refusal (a regex over ftbench's rule ids, or over each part of
    ado's reason); `witness` is an experiment and the changes to RUNNABLE that show it."""

    name: str
    refused_by: Literal["ado", "ftbench"]
    applies: Callable[[Case], bool]
    evidence: str
    reason: str
    witness: tuple[str, Entity] = field(default=(FULL, {}))


def _bound(prop: str, witness: tuple[str, Entity], why: str) -> Difference:
    return Difference(f"ado-bound.{prop}", "ado", lambda c: c.outside_ado(prop), rf"^{prop}=", why, witness)


def _moe_mismatch(c: Case) -> bool:
    """fast_moe set on a model without experts, or on one whose expert count it does not divide."""
    model = c.catalog.models.get(c.get("model_name"))
    experts, degree = (model.num_local_experts if model else None), c.get("fast_moe", 0)
    return bool(degree > 0 and (not experts or experts % degree != 0))


def _vision_mismatch(c: Case) -> bool:
    model = c.catalog.models.get(c.get("model_name"))
    dataset = c.catalog.datasets.get(c.get("dataset_id", "news-tokens-16384plus-entries-4096"))
    return model is not None and dataset is not None and model.vision != (dataset.kind == "vision")


def _defective_release(c: Case) -> bool:
    """ftbench's release catalog records a defect of the release for the experiment's method."""
    method = c.catalog.experiments[Experiment(canonical_experiment(c.experiment))].method
    return any(r.version == c.release and method in r.defects for r in load_releases().releases)


def _vision_release(c: Case) -> bool:
    """A vision dataset on a release whose parser has no --dataset_image_field."""
    dataset = c.catalog.datasets.get(c.get("dataset_id", ""))
    return (
        dataset is not None and dataset.kind == "vision" and c.release not in releases_knowing("--dataset_image_field")
    )


def _dataset(c: Case) -> DatasetEntry | None:
    return c.catalog.datasets.get(c.get("dataset_id", "news-tokens-16384plus-entries-4096"))


def _no_whole_step(c: Case) -> bool:
    dataset = _dataset(c)
    needed = int(c.get("batch_size", 1)) * int(c.get("gradient_accumulation_steps", 4))
    return dataset is not None and dataset.entries < needed


def _response_cut(c: Case) -> bool:
    dataset = _dataset(c)
    least = dataset.prompt_tokens_min if dataset else None
    return least is not None and int(c.get("model_max_length", 0)) <= least


def _beyond_positions(c: Case) -> bool:
    model = c.catalog.models.get(c.get("model_name"))
    limit = model.max_position_embeddings if model else None
    return limit is not None and int(c.get("model_max_length", 0)) > limit


def _gpu_kernels_on_cpu(c: Case) -> bool:
    kernels = c.get("fast_kernels") is not None and any(c.get("fast_kernels"))
    return c.gpus == 0 and bool(kernels or c.get("fast_moe", 0))


def _optimizer_gap(c: Case) -> bool:
    release = str(c.get("fms_hf_tuning_version", DEFAULT_FMS_HF_TUNING_VERSION))
    return why_not(str(c.get("optim", "adamw_torch")), release) is not None


def _stability_beyond_seed(c: Case) -> bool:
    """Seed 001's stability entity space: single node, FSDP, none of the other experiments' knobs."""
    if c.experiment != STABILITY:
        return False
    knobs = c.get("fast_moe", 0) != 0 or c.get("max_steps", -1) != -1 or "r" in c.entity or "lora_alpha" in c.entity
    return knobs or c.get("number_nodes", 1) > 1 or c.get("distributed_backend", "FSDP") != "FSDP"


#: The deliberate differences, once, as data; docs/measurements.md lists the same names.
DIFFERENCES: tuple[Difference, ...] = (
    _bound(
        "number_gpus",
        (FULL, {"number_gpus": 64, "batch_size": 128}),
        "ado's exploration domain stops at 32 GPUs; ftbench takes up to 1024",
    ),
    _bound(
        "model_max_length",
        (FULL, {"model_max_length": 262144}),
        "ado's domain stops at 131072 tokens; ftbench takes up to 1048576",
    ),
    _bound(
        "gradient_accumulation_steps",
        (FULL, {"gradient_accumulation_steps": 64}),
        "ado's domain stops at 32; ftbench takes up to 65536",
    ),
    _bound(
        "number_nodes",
        (FULL, {"number_gpus": 16, "batch_size": 32, "number_nodes": 16}),
        "ado's domain stops at 8 nodes; ftbench takes up to 1024",
    ),
    _bound("r", (LORA, {"r": 64}), "ado's domain stops at rank 32; ftbench takes up to 65536"),
    _bound("lora_alpha", (LORA, {"lora_alpha": 64}), "ado's domain stops at 32; ftbench takes up to 65536"),
    _bound(
        "max_steps", (FULL, {"max_steps": 20000}), "ado's domain stops at 10000 steps; ftbench takes up to 10 million"
    ),
    Difference(
        "ado-closed-gpu-models",
        "ado",
        lambda c: c.outside_ado("gpu_model"),
        r"^gpu_model=",
        "ado's gpu_model domain is its list of example GPUs; ftbench takes any node label value, the GPU "
        "product label of the cluster's nodes (seed 001 gives its GPUs as examples)",
        (FULL, {"gpu_model": "NVIDIA-H200"}),
    ),
    Difference(
        "ado-release-list",
        "ado",
        lambda c: c.outside_ado("fms_hf_tuning_version"),
        r"^fms_hf_tuning_version=",
        "ftbench's release catalog (ftbench/engines/data/fms-releases.yaml) has fms-hf-tuning releases newer "
        "than ado 1.8.12's list (3.2.2)",
        (FULL, {"fms_hf_tuning_version": "3.2.2"}),
    ),
    Difference(
        "ado-lora-target-gap",
        "ado",
        lambda c: c.experiment in c.ado.lora_models and c.get("model_name") not in c.ado.lora_models[c.experiment],
        r"^No target_modules mapping",
        "ado's LoRA experiment has no target modules for granite-4.0-1b, a model of its own models.yaml, so "
        "it cannot launch it (a defect); ftbench's catalog gives it q_proj, v_proj like the other granite-4.0 "
        "models",
        (LORA, {"model_name": "granite-4.0-1b"}),
    ),
    Difference(
        "cpu-multi-node",
        "ado",
        lambda c: c.gpus == 0 and c.get("number_nodes", 1) > 1,
        r"^number_gpus is 0 but number_nodes is",
        "ado checks max(1, number_gpus) % number_nodes, so its CPU runs are single-node; ftbench follows "
        "seed 001's rule 2 (number_gpus % number_nodes) and runs one CPU process per node (rule "
        "batch.cpu-nodes then asks for a batch that splits over the nodes)",
        (FULL, {"number_gpus": 0, "gpu_model": None, "number_nodes": 2}),
    ),
    Difference(
        "gpu-model-required",
        "ftbench",
        lambda c: c.gpus > 0 and not c.get("gpu_model"),
        r"^is_valid\.5$",
        "seed 001's is_valid rule 5; ado 1.8.12 does not check it and asks Ray for a resource named None",
        (FULL, {"gpu_model": None}),
    ),
    Difference(
        "moe-experts",
        "ftbench",
        _moe_mismatch,
        r"^is_valid\.7$",
        "seed 001's is_valid rule 7 (the model's num_local_experts divisible by fast_moe); ado 1.8.12 does "
        "not check it, so fast_moe on a dense model or on a non-divisor fails at run time",
        (FULL, {"fast_moe": 2, "fms_hf_tuning_version": "2.4.0"}),
    ),
    Difference(
        "lora-parameters-elsewhere",
        "ftbench",
        lambda c: c.experiment in (FULL, STABILITY, PT) and ("r" in c.entity or "lora_alpha" in c.entity),
        r"\.no-lora\.",
        "ado's full, stability and prompt-tuning experiments take r and lora_alpha and ignore them; ftbench "
        "refuses a parameter the experiment does not use",
        (FULL, {"r": 8}),
    ),
    Difference(
        "datasets-beyond-seeds",
        "ftbench",
        lambda c: "dataset_id" in c.entity and c.get("dataset_id") not in c.catalog.datasets,
        r"^catalog\.dataset$",
        "ado 1.8.12 also knows news-chars-*-entries-1024/-256 and news-tokens-128kplus-entries-4096, which "
        "no seed describes; ftbench's dataset catalog holds the seeds' datasets (a catalog entry adds one)",
        (FULL, {"dataset_id": "news-chars-512-entries-1024"}),
    ),
    Difference(
        "dataset-modality",
        "ftbench",
        _vision_mismatch,
        r"^catalog\.dataset$",
        "a vision dataset on a text model (or a text dataset on a vision model) cannot train; ado only finds "
        "out when the run fails",
        (FULL, {"dataset_id": "vision-384x384-16384plus-entries-4096", "fms_hf_tuning_version": "2.8.2"}),
    ),
    Difference(
        "phony-release",
        "ftbench",
        lambda c: c.release == "3.0.0.1",
        r"^engine\.fms-installable$",
        "3.0.0.1 is not a published fms-hf-tuning release (seed 001 calls it phony), so ftbench cannot build "
        "it; ado installs it from a git commit",
        (FULL, {"fms_hf_tuning_version": "3.0.0.1"}),
    ),
    Difference(
        "release-defects",
        "ftbench",
        _defective_release,
        r"^engine\.fms-known-defect$",
        "ftbench's release catalog records that prompt tuning crashes in fms-hf-tuning 2.8.2 to 3.2.2 (trl's "
        "token accuracy on the virtual tokens); ado launches it and the run fails",
        (PT, {"fms_hf_tuning_version": "3.0.0"}),
    ),
    Difference(
        "vision-needs-release",
        "ftbench",
        _vision_release,
        r"^engine\.fms-vision-version$",
        "vision datasets need --dataset_image_field, which fms-hf-tuning has from 2.8.2; ado launches older "
        "releases too, which cannot train on the images",
        (FULL, {"model_name": "granite-vision-3.2-2b", "dataset_id": "vision-384x384-16384plus-entries-4096"}),
    ),
    Difference(
        "data-parallel-one-node",
        "ftbench",
        lambda c: c.get("distributed_backend") == "None" and c.get("number_nodes", 1) > 1,
        r"^backend\.none-single-node$",
        "distributed_backend None is seed 001's DataParallel, one process on one node; ado accepts it on several nodes",
        (FULL, {"distributed_backend": "None", "number_nodes": 2}),
    ),
    Difference(
        "max-steps-zero",
        "ftbench",
        lambda c: c.get("max_steps") == 0,
        r"^steps\.nonzero$",
        "ado passes max_steps 0 on to transformers, which then trains num_train_epochs; ftbench refuses the "
        "ambiguous value (the seed asks for epochs with -1)",
        (FULL, {"max_steps": 0}),
    ),
    Difference(
        "data-whole-step",
        "ftbench",
        _no_whole_step,
        r"^data\.whole-step$",
        "one optimizer step needs batch_size x gradient_accumulation_steps entries and the dataset has fewer "
        "(every catalog dataset has at most 4096, so this also bounds batch_size below ado's 4096); ado "
        "launches it and the trainer never completes one step",
        (FULL, {"batch_size": 2048}),
    ),
    Difference(
        "data-response-fits",
        "ftbench",
        _response_cut,
        r"^data\.response-fits$",
        "a model_max_length no longer than the dataset's prompts truncates every response away, leaving no "
        "token to train on; ado launches it",
        (FULL, {"model_max_length": 128}),
    ),
    Difference(
        "model-positions",
        "ftbench",
        _beyond_positions,
        r"^model\.positions$",
        "a model_max_length beyond the model's max_position_embeddings (where the catalog records it) uses "
        "positions the model never trained; ado launches it",
        (FULL, {"model_name": "granite-7b-base", "model_max_length": 8192}),
    ),
    Difference(
        "gpu-kernels-on-cpu",
        "ftbench",
        _gpu_kernels_on_cpu,
        r"^applied\.gpu-kernels$",
        "fast_kernels and fast_moe are fms-acceleration triton kernels, which need a GPU; ado launches them "
        "with number_gpus 0 and the run fails",
        (
            LORA,
            {
                "number_gpus": 0,
                "gpu_model": None,
                "fast_moe": 1,
                "model_name": "mixtral-8x7b-instruct-v0.1",
                "fms_hf_tuning_version": "2.8.2",
            },
        ),
    ),
    Difference(
        "backend-one-process",
        "ftbench",
        lambda c: (
            c.get("distributed_backend") in ("FSDP", "DDP", "DeepSpeed")
            and c.gpus <= 1
            and c.get("number_nodes", 1) == 1
        ),
        r"^applied\.backend-one-process$",
        "a distributed backend on one process (number_gpus 0 or 1 on one node) is never applied; ado accepts it "
        "and runs one process",
        (FULL, {"distributed_backend": "DDP", "number_gpus": 1, "batch_size": 2}),
    ),
    Difference(
        "gpu-model-no-gpu",
        "ftbench",
        lambda c: c.gpus == 0 and bool(c.get("gpu_model")),
        r"^applied\.gpu-model-no-gpu$",
        "gpu_model picks GPU nodes, and with number_gpus 0 there is none to pick; ado accepts it and ignores it",
        (FULL, {"number_gpus": 0, "distributed_backend": None}),
    ),
    Difference(
        "precision-conflict",
        "ftbench",
        lambda c: bool(c.get("bf16")) and c.get("accelerate_config_mixed_precision") == "fp16",
        r"^applied\.precision-conflict$",
        "bf16 true with accelerate_config_mixed_precision fp16 asks for two mixed precisions in one run; ado "
        "passes both on",
        (FULL, {"bf16": True, "accelerate_config_mixed_precision": "fp16"}),
    ),
    Difference(
        "optimizer-stack",
        "ftbench",
        _optimizer_gap,
        r"^engine\.optimizer$",
        "an optimizer the release's transformers does not have, or whose package the release's stack does not "
        "install (bitsandbytes, galore-torch, apex, ...); ado launches it and the run fails",
        (FULL, {"optim": "galore_adamw"}),
    ),
    Difference(
        "stability-as-seed",
        "ftbench",
        _stability_beyond_seed,
        r"^experiment\.full_stability\.",
        "seed 001's stability experiment is single-node FSDP over a fixed set of parameters; ado registers it "
        "with every optional property and no single-node restriction",
        (STABILITY, {"number_nodes": 2}),
    ),
)


def _ado_id(experiment: Experiment) -> str:
    """The id ado registers (its gptq spelling where the seed writes gtpq)."""
    return next((alias for alias, e in EXPERIMENT_ALIASES.items() if e == experiment), experiment.value)


def _driver(ado_dir: Path, mode: str, payload: Any = None) -> Any:
    """Run tests/peer/ado_validate.py in the ado environment (its python has no ftbench)."""
    python = ado_dir.parents[4] / "bin" / "python"
    done = subprocess.run(
        [str(python), str(DRIVER), mode], input=json.dumps(payload), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def entities(ado: Ado, catalog: Catalog, ado_models: dict[str, dict[str, str]]) -> st.SearchStrategy[Case]:
    """A runnable entity (by both sides' reading of the seeds), then one to three of its parameters
    moved to or past a boundary of either side. A third of the cases stay runnable, so agreement on
    what runs is tested as much as agreement on what does not, and a third move one parameter, so
    most disagreements have a single cause."""
    experiments = sorted(_ado_id(e) for e in Experiment)
    shared = sorted(m for m in ado_models if m in catalog.models)
    gptq = sorted(m for m in shared if "GPTQ-Quantized" in ado_models[m])
    vanilla = sorted(m for m in shared if "Vanilla" in ado_models[m])
    moe = sorted(m for m in shared if catalog.models[m].num_local_experts)
    full = ado.domains[Experiment.FULL.value]
    gpu_models = [g for g in full["gpu_model"]["values"] if g]
    ado_datasets, ado_versions = full["dataset_id"]["values"], full["fms_hf_tuning_version"]["values"]
    datasets = sorted(set(ado_datasets) | set(catalog.datasets))
    versions = sorted(set(ado_versions) | set(FMS_HF_TUNING_VERSIONS))
    both_versions = sorted(set(ado_versions) & {r.version for r in load_releases().installable})
    moe_versions = [v for v in both_versions if v in releases_knowing("--fast_moe")]
    vision_versions = set(releases_knowing("--dataset_image_field"))

    def method(experiment: str) -> str:
        return str(catalog.experiments[Experiment(canonical_experiment(experiment))].method)

    def defective(experiment: str) -> set[str]:
        return {r.version for r in load_releases().releases if method(experiment) in r.defects}

    def optional(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(st.none(), values)

    def on_gpus(entity: Entity, gpus: int, per_device: int = 2) -> Entity:
        """`entity` on `gpus` GPUs, keeping the batch divisible and a GPU model set."""
        gpu = entity.get("gpu_model") or gpu_models[0]
        return {**entity, "number_gpus": gpus, "batch_size": per_device * max(1, gpus), "gpu_model": gpu}

    @st.composite
    def runnable(draw: st.DrawFn, experiment: str) -> Entity:
        is_gptq, is_lora = "gptq" in experiment, "lora" in experiment
        model = draw(st.sampled_from(gptq if is_gptq else vanilla))
        vision = catalog.models[model].vision
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        nodes = [n for n in (1, 2, 4) if gpus % n == 0 and (n == 1 or experiment != STABILITY)]
        fitting = [
            d for d in ado_datasets if d in catalog.datasets and (catalog.datasets[d].kind == "vision") == vision
        ]
        releases = [v for v in both_versions if v not in defective(experiment) and (not vision or v in vision_versions)]
        # No release runs prompt tuning on a vision model (the defect starts where vision support
        # does): such a base is not runnable, and stays in as a case both sides judge.
        releases = releases or both_versions
        return {
            "model_name": model,
            "model_max_length": draw(st.sampled_from([512, 2048, 8192])),
            "number_gpus": gpus,
            "batch_size": draw(st.sampled_from([1, 2, 4, 8])) * max(1, gpus),
            "gpu_model": draw(st.sampled_from(gpu_models)) if gpus else None,
            "number_nodes": draw(optional(st.sampled_from(nodes))),
            "dataset_id": draw(st.sampled_from(fitting)) if vision else draw(optional(st.sampled_from(fitting))),
            "torch_dtype": draw(
                optional(st.sampled_from(["float16"] if is_gptq else ["bfloat16", "float16", "float32"]))
            ),
            "distributed_backend": draw(
                optional(st.sampled_from(["FSDP"] if experiment == STABILITY else ["FSDP", "DDP"]))
            ),
            "fms_hf_tuning_version": draw(st.sampled_from(releases))
            if vision
            else draw(optional(st.sampled_from(releases))),
            "gradient_accumulation_steps": draw(optional(st.sampled_from([1, 4, 8]))),
            "max_steps": None if experiment == STABILITY else draw(optional(st.sampled_from([-1, 1, 5]))),
            "r": draw(optional(st.sampled_from([4, 8, 16]))) if is_lora else None,
            "lora_alpha": draw(optional(st.sampled_from([16, 32]))) if is_lora else None,
        }

    # Each move takes the draw, the experiment and the entity, and returns the moved entity.
    def setting(prop: str, values: st.SearchStrategy[Any]) -> Move:
        return lambda draw, _, entity: {**entity, prop: draw(values)}

    def gpus(draw: st.DrawFn, _: str, entity: Entity) -> Entity:
        count = draw(st.sampled_from([0, 3, 5, 6, 16, 32, 33, 64]))
        return on_gpus(entity, count) if draw(st.booleans()) else {**entity, "number_gpus": count}

    def batch(draw: st.DrawFn, _: str, entity: Entity) -> Entity:
        big = st.sampled_from([512, 1024, 2048, 4096]).map(lambda b: b * max(1, entity["number_gpus"]))
        return {**entity, "batch_size": draw(st.one_of(st.sampled_from([1, 3, 7, 4097]), st.integers(1, 5000), big))}

    def nodes(draw: st.DrawFn, _: str, entity: Entity) -> Entity:
        count = draw(st.sampled_from([2, 3, 4, 8, 9, 16]))
        if draw(st.booleans()):
            entity = on_gpus(entity, count * draw(st.sampled_from([1, 2])))
        return {**entity, "number_nodes": count}

    def model(draw: st.DrawFn, experiment: str, entity: Entity) -> Entity:
        """Any shared model, or one ado's LoRA experiment has no target modules for."""
        untargeted = [m for m in vanilla if m not in ado.lora_models.get(experiment, vanilla)]
        choices = (
            st.one_of(st.sampled_from(shared), st.sampled_from(untargeted)) if untargeted else st.sampled_from(shared)
        )
        return {**entity, "model_name": draw(choices)}

    def release(draw: st.DrawFn, experiment: str, entity: Entity) -> Entity:
        """Any release, or one where the release lists part or the experiment's method has a defect."""
        edge = st.sampled_from(sorted(set(versions) - set(both_versions) | defective(experiment)))
        return {**entity, "fms_hf_tuning_version": draw(st.one_of(st.sampled_from(versions), edge))}

    def fast_moe(draw: st.DrawFn, _: str, entity: Entity) -> Entity:
        degree = draw(st.sampled_from([1, 2, 3, 4, 8, 16, 33, 64]))
        return {**entity, "fast_moe": degree, "fms_hf_tuning_version": draw(st.sampled_from(versions))}

    def expert_parallel(draw: st.DrawFn, _: str, entity: Entity) -> Entity:
        """fast_moe as it can run: a MoE model, a release with --fast_moe, a common divisor."""
        model = draw(st.sampled_from(moe))
        experts = catalog.models[model].num_local_experts or 1
        count = draw(st.sampled_from([2, 4, 8]))
        degree = draw(st.sampled_from([d for d in (1, 2, 4, 8) if count % d == 0 and experts % d == 0]))
        version = draw(st.sampled_from(moe_versions))
        moved = on_gpus({**entity, "model_name": model}, count)
        return {**moved, "fast_moe": degree, "fms_hf_tuning_version": version}

    def data_parallel(draw: st.DrawFn, _: str, entity: Entity) -> Entity:
        count = draw(st.sampled_from([1, 2]))
        return {**on_gpus(entity, 2 * count), "distributed_backend": "None", "number_nodes": count}

    def lora(draw: st.DrawFn, _: str, entity: Entity) -> Entity:
        rank, alpha = draw(st.sampled_from([1, 32, 33, 64])), draw(st.sampled_from([None, 1, 32, 33, 128]))
        return {**entity, "r": rank, "lora_alpha": alpha}

    moves: dict[str, Move] = {
        "model": model,
        "length": setting("model_max_length", st.sampled_from([1, 131072, 131073, 262144])),
        "gpus": gpus,
        "batch": batch,
        "gpu-model": setting("gpu_model", st.sampled_from([None, "NVIDIA-H200", "NVIDIA-L4", gpu_models[0]])),
        "nodes": nodes,
        "dataset": setting("dataset_id", st.sampled_from(datasets)),
        "dtype": setting("torch_dtype", st.sampled_from(["bfloat16", "float16", "float32"])),
        "backend": setting("distributed_backend", st.sampled_from(["FSDP", "DDP", "None"])),
        "release": release,
        "accumulation": setting("gradient_accumulation_steps", st.sampled_from([32, 33, 64])),
        "fast-moe": fast_moe,
        "expert-parallel": expert_parallel,
        "data-parallel": data_parallel,
        "max-steps": setting("max_steps", st.sampled_from([0, 10000, 10001])),
        "lora": lora,
    }
    names = sorted(moves)

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        experiment = draw(st.sampled_from(experiments))
        entity = draw(runnable(experiment))
        moved = draw(
            st.one_of(
                st.just([]),
                st.sampled_from(names).map(lambda n: [n]),
                st.lists(st.sampled_from(names), min_size=2, max_size=3, unique=True),
            )
        )
        for name in moved:
            entity = moves[name](draw, experiment, entity)
        return Case(experiment, {k: v for k, v in entity.items() if v is not None}, ado, catalog, tuple(moved))

    return draw_case()


def spec_of(case: Case) -> dict[str, Any]:
    """The ftbench spec with the same parameters: ado's names mapped by ftbench's own table
    (ftbench/contracts/ado_names.py), the others by the spec's camelCase alias of the same name."""
    fields = FineTuneExperimentSpec.model_fields
    spec = {ADO_PARAMETERS.get(p) or fields[p].alias or p: v for p, v in case.entity.items()}
    return {"experiment": case.experiment, **spec}


def _collect(strategy: st.SearchStrategy[Case]) -> list[Case]:
    """Draw EXAMPLES cases deterministically (no test per case: the ado driver judges them all in one run)."""
    drawn: list[Case] = []

    @settings(
        max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, phases=[Phase.generate], print_blob=False
    )
    @given(strategy)
    def collect(case: Case) -> None:
        drawn.append(case)

    collect()
    return drawn


def _explanations(case: Case, verdict: Verdict, report: ValidationReport) -> list[Difference] | None:
    """The differences that explain a disagreement, or None when it is not deliberate: every ftbench
    rule that fired (or every part of ado's reason) must be the evidence of a difference that applies."""
    refused_by = "ftbench" if verdict["valid"] else "ado"
    applicable = [d for d in DIFFERENCES if d.refused_by == refused_by and d.applies(case)]
    findings = [i.rule for i in report.issues] if refused_by == "ftbench" else verdict["reason"].split("; ")
    if not findings or not all(any(re.search(d.evidence, f) for d in applicable) for f in findings):
        return None
    return [d for d in applicable if any(re.search(d.evidence, f) for f in findings)]


def _witness(ado: Ado, catalog: Catalog, difference: Difference) -> Case:
    experiment, changes = difference.witness
    entity = {k: v for k, v in {**RUNNABLE, **changes}.items() if v is not None}
    return Case(experiment, entity, ado, catalog, (f"witness of {difference.name}",))


@pytest.fixture(scope="module")
def ado(ado_dir: Path) -> Ado:
    described = _driver(ado_dir, "domains")
    return Ado(described["domains"], described["lora_models"])


def test_every_ftbench_experiment_is_registered_by_ado(ado: Ado) -> None:
    assert sorted(ado.domains) == sorted(_ado_id(e) for e in Experiment)


def test_validation_agrees_with_ado_except_documented_differences(ado_dir: Path, ado: Ado) -> None:
    """The baseline runs on both sides for every experiment, each witness shows its difference and
    only it, and every drawn disagreement is explained (all judged in one run of the ado driver)."""
    catalog = load_catalog()
    ado_models = yaml.safe_load((ado_dir / "config" / "models.yaml").read_text())
    baselines = [Case(_ado_id(e), dict(RUNNABLE), ado, catalog, ("baseline",)) for e in Experiment]
    witnesses = [_witness(ado, catalog, d) for d in DIFFERENCES]
    drawn = _collect(entities(ado, catalog, ado_models))
    cases = [*baselines, *witnesses, *drawn]
    verdicts = _driver(ado_dir, "judge", [{"experiment": c.experiment, "entity": c.entity} for c in cases])
    reports = [validate_spec_dict(spec_of(c), catalog) for c in cases]
    assert len(verdicts) == len(cases)

    def shown(i: int) -> str:
        case, verdict, report = cases[i], verdicts[i], reports[i]
        return (
            f"{case.experiment} {json.dumps(case.entity)} ({', '.join(case.moved) or 'runnable'}): "
            f"ado {'accepts' if verdict['valid'] else 'refuses: ' + verdict['reason']}; "
            f"ftbench {'accepts' if report.ok else 'refuses: ' + report.summary()}"
        )

    for i in range(len(baselines)):
        assert verdicts[i]["valid"] and reports[i].ok, shown(i)
    for i, difference in enumerate(DIFFERENCES, start=len(baselines)):
        refused_by = "ftbench" if verdicts[i]["valid"] else "ado"
        used = _explanations(cases[i], verdicts[i], reports[i]) if verdicts[i]["valid"] != reports[i].ok else None
        assert refused_by == difference.refused_by and used == [difference], shown(i)

    unexplained, hits, agreed = [], dict.fromkeys((d.name for d in DIFFERENCES), 0), {True: 0, False: 0}
    for i in range(len(baselines) + len(witnesses), len(cases)):
        if verdicts[i]["valid"] == reports[i].ok:
            agreed[reports[i].ok] += 1
            continue
        used = _explanations(cases[i], verdicts[i], reports[i])
        if used is None:
            unexplained.append(shown(i))
        for d in used or ():
            hits[d.name] += 1
    print(f"{len(drawn)} drawn: both accept {agreed[True]}, both refuse {agreed[False]}, differences {hits}")
    assert not unexplained, "\n".join(unexplained)
    assert agreed[True] >= len(drawn) // 5, "too few runnable entities to say the two agree on what runs"


def test_differences_are_documented() -> None:
    """docs/measurements.md's section lists the same differences, each with the side that refuses."""
    text = DOCS.read_text()
    assert DOCS_SECTION in text
    section = re.split(r"\n## ", text.split(DOCS_SECTION, 1)[1], maxsplit=1)[0]
    documented = dict(re.findall(r"^\| `([^`]+)` \| (ado|ftbench) \|", section, flags=re.MULTILINE))
    assert documented == {d.name: d.refused_by for d in DIFFERENCES}
