"""Rules that come from the fms-hf-tuning releases themselves (ftbench/engines/data).

What a release can run is read from its own parser (`fms-flags.yaml`) and from the release
catalog (`fms-releases.yaml`: installable or not, known defects), so a spec asking a release for
something it has no flag for, or for a method it is known to crash on, is Invalid up front with the
reason instead of failing at run time. Each rule also has a CEL twin: the release data ship with
the CRD, which is regenerated when they change.
"""

from __future__ import annotations

from collections.abc import Iterator

from ftbench.api import effective
from ftbench.api.rules.rule import Rule, RuleFamily, cel_list
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import AttentionImplementation, Engine, Experiment, experiment_spellings
from ftbench.engines.flags import releases_knowing, releases_reading_images
from ftbench.engines.optimizers import load_optimizers, why_not
from ftbench.engines.releases import TRL_STACK, load_releases, stack_label, version_tuple

FMS = "self.engine != 'fms-hf-tuning' || "


def _newest(versions: tuple[str, ...]) -> str:
    return max(versions, key=version_tuple)


def engine_rules(catalog: Catalog) -> Iterator[Rule]:
    family = RuleFamily()
    releases = load_releases()
    not_installable = [r for r in releases.releases if not r.installable]

    @family.rule(
        "engine.fms-installable",
        "fmsHfTuningVersion",
        "the fms-hf-tuning release can be installed",
        cel=FMS + "!(self.fmsHfTuningVersion in " + cel_list([r.version for r in not_installable]) + ")",
    )
    def installable(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.engine != Engine.FMS_HF_TUNING:
            return None
        for r in not_installable:
            if r.version == s.fms_hf_tuning_version:
                return f"fms-hf-tuning {r.version} cannot run: {r.reason}"
        return None

    defects = [(r.version, method, why) for r in releases.releases for method, why in r.defects.items()]
    by_method = {e.name.value: e.method for e in catalog.experiments.values()}
    pairs = [
        f"(self.fmsHfTuningVersion == '{v}' && self.experiment in {cel_list(exps)})"
        for v, method, _ in defects
        if (exps := sorted(a for e, m in by_method.items() if m == method for a in experiment_spellings(Experiment(e))))
    ]

    @family.rule(
        "engine.fms-known-defect",
        "fmsHfTuningVersion",
        "the fms-hf-tuning release can run the experiment's method",
        cel=FMS + "!(" + " || ".join(pairs or ["false"]) + ")",
    )
    def defect(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.engine != Engine.FMS_HF_TUNING:
            return None
        for version, method, why in defects:
            if version == s.fms_hf_tuning_version and by_method.get(s.experiment.value) == method:
                ok = [r.version for r in releases.installable if method not in r.defects]
                return f"{why}; use fmsHfTuningVersion {_newest(tuple(ok))} or engine trl for {s.experiment.value}"
        return None

    yield from family.rules
    yield from _flag_rules(catalog)
    yield _optimizer_rule()


def _optimizer_rule() -> Rule:
    """The optimizer runs on the spec's stack: its transformers offers the name and the package it needs is
    installed there (ftbench.engines.optimizers, generated from each stack)."""
    stacks = load_optimizers()

    def optimizer(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        stack = effective.engine_stack(s)
        why = why_not(s.optim, stack)
        if why is None:
            return None
        runs = stacks[stack]["runs"]
        return f"optim {s.optim} {why} ({stack_label(stack)}); use one of {', '.join(runs)}"

    per_release = [
        f"(self.fmsHfTuningVersion == '{stack}' && !(self.optim in {cel_list(table['runs'])}))"
        for stack, table in stacks.items()
        if stack != TRL_STACK
    ]
    return Rule(
        "engine.optimizer",
        "optim",
        "the engine's stack runs the optimizer (its transformers has it, its package is installed)",
        optimizer,
        f"self.engine == 'trl' ? self.optim in {cel_list(stacks[TRL_STACK]['runs'])} : !("
        + " || ".join(per_release or ["false"])
        + ")",
    )


def _flag_rules(catalog: Catalog) -> Iterator[Rule]:
    """A setting that only exists as a flag some releases have."""
    family = RuleFamily()
    moe_ok = releases_knowing("--fast_moe")

    @family.rule(
        "engine.fast-moe-version",
        "fmsHfTuningVersion",
        "fastMoe needs a release with --fast_moe",
        cel="self.fastMoe == 0 || " + FMS + "self.fmsHfTuningVersion in " + cel_list(moe_ok),
    )
    def fast_moe(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.fast_moe == 0 or s.engine != Engine.FMS_HF_TUNING or s.fms_hf_tuning_version in moe_ok:
            return None
        return (
            f"fastMoe needs --fast_moe, which fms-hf-tuning {s.fms_hf_tuning_version}'s parser does not have; "
            f"set fmsHfTuningVersion to one of {', '.join(moe_ok)}, or fastMoe to 0"
        )

    image_ok = releases_reading_images()
    vision = sorted(d.name for d in catalog.datasets.values() if d.kind == "vision")

    @family.rule(
        "engine.fms-vision-version",
        "fmsHfTuningVersion",
        "vision datasets need a release with --dataset_image_field",
        cel=FMS + "!(self.datasetId in " + cel_list(vision) + ") || self.fmsHfTuningVersion in " + cel_list(image_ok),
    )
    def vision_release(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.engine != Engine.FMS_HF_TUNING or s.dataset_id not in vision or s.fms_hf_tuning_version in image_ok:
            return None
        return (
            f"vision dataset {s.dataset_id} needs --dataset_image_field, which fms-hf-tuning "
            f"{s.fms_hf_tuning_version}'s parser does not have; set fmsHfTuningVersion to one of {', '.join(image_ok)}"
        )

    eager_ok = releases_knowing("--flash_attn_implementation")

    @family.rule(
        "engine.fms-eager-attention",
        "attentionImplementation",
        "eager attention with fms-hf-tuning needs a release with --flash_attn_implementation",
        cel=FMS + "!has(self.attentionImplementation) || self.attentionImplementation != 'eager' || "
        "self.fmsHfTuningVersion in " + cel_list(eager_ok),
    )
    def eager_attention(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.engine != Engine.FMS_HF_TUNING or s.attention_implementation != AttentionImplementation.EAGER:
            return None
        if s.fms_hf_tuning_version in eager_ok:
            return None
        return (
            f"attentionImplementation eager with fms-hf-tuning needs --flash_attn_implementation, which "
            f"{s.fms_hf_tuning_version}'s parser does not have (its --use_flash_attn only chooses flash_attention_2 "
            f"or the default sdpa); set fmsHfTuningVersion to one of {', '.join(eager_ok)}, use sdpa, or engine trl"
        )

    kwargs_ok = releases_knowing("--dataset_kwargs")

    @family.rule(
        "engine.fms-dataset-kwargs",
        "datasetKwargsSkipPrepareDataset",
        "datasetKwargsSkipPrepareDataset needs a release with --dataset_kwargs",
        cel=FMS + "!self.datasetKwargsSkipPrepareDataset || self.fmsHfTuningVersion in " + cel_list(kwargs_ok),
    )
    def dataset_kwargs(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.engine != Engine.FMS_HF_TUNING or not s.dataset_kwargs_skip_prepare_dataset:
            return None
        if s.fms_hf_tuning_version in kwargs_ok:
            return None
        return (
            f"fms-hf-tuning {s.fms_hf_tuning_version}'s parser has no --dataset_kwargs (it sets skip_prepare_dataset "
            "itself for vision datasets); leave datasetKwargsSkipPrepareDataset false, or use engine trl"
        )

    yield from family.rules
