"""The rules each experiment of the catalog brings: fields it leaves unset, the values it allows,
the method it is (seed 001's experiment definitions)."""

from __future__ import annotations

from collections.abc import Iterator

from ftbench.api.rules.rule import Rule, cel_list
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog, ExperimentEntry
from ftbench.contracts.enums import experiment_spellings


def experiment_rules(exp: ExperimentEntry) -> Iterator[Rule]:
    """Rules that hold for one experiment, derived from its catalog entry."""
    if not exp.multi_node:
        yield _single_node_rule(exp)
    yield _allowed_values_rule(exp, "torch_dtype", "torch-dtype", [d.value for d in exp.torch_dtypes])
    yield _allowed_values_rule(exp, "distributed_backend", "backend", [b.value for b in exp.backends])
    yield _allowed_values_rule(exp, "engine", "engine", [e.value for e in exp.engines])

    if not exp.lora:
        for field_name in ("r", "lora_alpha", "target_modules"):
            yield _unset_rule(exp, field_name, "no-lora", "a LoRA parameter")

    if exp.allowed is not None:
        yield _only_allowed_rule(exp)


def _single_node_rule(exp: ExperimentEntry) -> Rule:
    name = exp.name.value

    def single_node(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.experiment != exp.name or s.number_nodes == 1:
            return None
        return f"{name} runs on a single node; set numberNodes to 1"

    return Rule(f"experiment.{_short(exp)}.single-node", "numberNodes", f"{name}: one node", single_node,
                _not_experiment(exp) + "self.numberNodes == 1")  # fmt: skip


def _unset_rule(exp: ExperimentEntry, field_name: str, suffix: str, what: str) -> Rule:
    """`field` does not apply to this experiment and must stay unset (one rule per field, so the
    error names the field that was set)."""
    name, alias = exp.name.value, _camel(field_name)

    def check(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.experiment != exp.name or getattr(s, field_name) is None:
            return None
        return f"{alias} is {what}, not used by {name}; remove it"

    return Rule(
        f"experiment.{_short(exp)}.{suffix}.{alias}",
        alias,
        f"{name}: {alias} must not be set",
        check,
        f"{_not_experiment(exp)}!has(self.{alias})",
    )


def _allowed_values_rule(exp: ExperimentEntry, field_name: str, suffix: str, allowed: list[str]) -> Rule:
    """`field` must be one of the experiment's values; an unset optional field (None) means its default."""
    name, alias = exp.name.value, _camel(field_name)
    optional = FineTuneExperimentSpec.model_fields[field_name].default is None

    def check(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        value = getattr(s, field_name)
        if s.experiment != exp.name or value is None or value in allowed:
            return None
        fix = f"remove {alias}" if optional else f"set {alias} to {' or '.join(allowed)}"
        return f"{name} allows {alias} {' or '.join(allowed)}, not {value.value}; {fix}"

    unset = f"!has(self.{alias}) || " if optional else ""
    return Rule(
        f"experiment.{_short(exp)}.{suffix}",
        alias,
        f"{name}: {alias} in {allowed}",
        check,
        f"{_not_experiment(exp)}{unset}self.{alias} in {cel_list(allowed)}",
    )


def _only_allowed_rule(exp: ExperimentEntry) -> Rule:
    """Fields an experiment fixes must keep their defaults (e.g. the stability experiment's steps)."""
    name = exp.name.value
    # Fields with rules of their own, or that every experiment takes.
    always = {
        "experiment",
        "engine",
        "model",
        "modelMaxLength",
        "numberGpus",
        "batchSize",
        "run",
        "numberNodes",
        "r",
        "loraAlpha",
        "targetModules",
    }
    fixed: dict[str, object] = {}
    for field_name, info in FineTuneExperimentSpec.model_fields.items():
        alias = info.alias or field_name
        if alias in always or alias in (exp.allowed or ()):
            continue
        fixed[field_name] = info.get_default(call_default_factory=True)

    def only_allowed(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.experiment != exp.name:
            return None
        changed = [_camel(f) for f, default in fixed.items() if getattr(s, f) != default]
        if not changed:
            return None
        return (
            f"{name} fixes {', '.join(changed)} (it runs {exp.trials} trials of {exp.max_steps} steps on one node); "
            f"remove them. It accepts only: {', '.join(exp.allowed or ())}"
        )

    clauses = []
    for f, default in fixed.items():
        alias = _camel(f)
        clauses.append(f"!has(self.{alias})" if default is None else f"self.{alias} == {_cel_literal(default)}")
    return Rule(
        f"experiment.{_short(exp)}.fixed",
        "experiment",
        f"{name}: only {', '.join(exp.allowed or ())} may be set",
        only_allowed,
        _not_experiment(exp) + "(" + " && ".join(clauses) + ")",
    )


def _not_experiment(exp: ExperimentEntry) -> str:
    """CEL prefix "the spec is not this experiment || ", true for none of its spellings (aliases)."""
    spellings = experiment_spellings(exp.name)
    if len(spellings) == 1:
        return f"self.experiment != '{spellings[0]}' || "
    return f"!(self.experiment in {cel_list(list(spellings))}) || "


def _short(exp: ExperimentEntry) -> str:
    """finetune_full_stability-v1.0.0 -> full_stability: unique and recognisable in rule ids."""
    return exp.name.value.removeprefix("finetune_").rsplit("-v", 1)[0]


def _camel(field_name: str) -> str:
    info = FineTuneExperimentSpec.model_fields[field_name]
    return info.alias or field_name


def _cel_literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, float):
        return repr(value)
    return str(value)
