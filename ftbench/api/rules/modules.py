"""Rules for the fields that name a model's modules: LoRA's targetModules and FSDP's layer classes.

A name the model does not have fails at run time (peft finds no target; accelerate finds no layer class
to wrap), or, next to names it does have, is skipped without a word and fewer adapters train than the
spec says. The names come from ftbench/engines/data/modules.yaml: every catalog architecture built in
each engine stack's own transformers (ftbench.engines.modules). Where the table does not know the model
(a vision model, a model_map entry outside the catalog, an architecture the stack cannot build) nothing
is judged here.
"""

from __future__ import annotations

from collections.abc import Iterator

from ftbench.api import effective
from ftbench.api.rules.rule import Rule, RuleFamily
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.engines.modules import model_modules, stack_transformers, targets
from ftbench.engines.releases import stack_label


def _where(s: FineTuneExperimentSpec) -> str:
    stack = effective.engine_stack(s)
    return f"{s.model} under {stack_label(stack)} (transformers {stack_transformers(stack)})"


def _short(paths: list[str]) -> list[str]:
    """The names a user writes: each target path's last part, once."""
    return sorted({p.rsplit(".", 1)[-1] for p in paths})


def target_names(s: FineTuneExperimentSpec, c: Catalog) -> list[str]:
    """The LoRA target names the model has in the spec's engine stack ([] where the table does not know it)."""
    entry = model_modules(effective.engine_stack(s), s.model, c)
    return _short(entry["targets"]) if entry is not None else []


def suggested_targets(names: list[str]) -> list[str]:
    """What to suggest for targetModules: the attention projections LoRA usually adapts, as the model names them."""
    return [n for n in names if n in ("q_proj", "v_proj")] or [n for n in names if "attn" in n] or names[:2]


def module_rules() -> Iterator[Rule]:
    family = RuleFamily()

    @family.rule("engine.target-modules", "targetModules", "LoRA's target modules are modules of the model")
    def target_modules(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        if not s.target_modules or not effective.experiment_of(s, c).lora:
            return None
        entry = model_modules(effective.engine_stack(s), s.model, c)
        if entry is None:
            return None
        missing = [t for t in s.target_modules if not any(targets(t, p) for p in entry["targets"])]
        if not missing:
            return None
        return (
            f"targetModules {', '.join(missing)}: no module of {_where(s)} has that name, so LoRA would "
            f"{'find no target and fail' if len(missing) == len(s.target_modules) else 'skip it and train fewer adapters'}"
            f"; use names from {', '.join(_short(entry['targets']))}"
        )

    @family.rule(
        "engine.layer-class",
        "accelerateConfigFsdpTransformerLayerClsToWrap",
        "FSDP's layer classes are classes of the model",
    )
    def layer_class(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        wanted = s.accelerate_config_fsdp_transformer_layer_cls_to_wrap
        entry = model_modules(effective.engine_stack(s), s.model, c) if wanted else None
        if wanted is None or entry is None:
            return None
        missing = [name for name in wanted.split(",") if name not in entry["classes"]]
        if not missing:
            return None
        layer = c.models[s.model].layer_class if s.model in c.models else None
        return (
            f"accelerateConfigFsdpTransformerLayerClsToWrap {', '.join(missing)}: {_where(s)} has no module of that "
            "class, so FSDP could not wrap it"
            + (f"; use {layer} (the model's decoder layer), or leave the field unset" if layer else "")
        )

    yield from family.rules
