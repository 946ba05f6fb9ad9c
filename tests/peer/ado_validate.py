"""Judge entities with ado's own validation; runs INSIDE the ado peer environment (tests/peer/ado_env.py).

Not part of ftbench and not importable from it: the ado environment has no ftbench, and the test
environment has no ado-core. tests/peer/test_ado_validation.py runs it in two ways:

- ``ado_validate.py domains`` prints each registered experiment's property domains and the models
  it has LoRA target modules for, as JSON ``{"domains": {<experiment id>: {<property>: {"values":
  [...]} | {"range": [low, high_exclusive]}}}, "lora_models": {<experiment id>: [...]}}``, so the
  test draws entities around ado's own bounds and names them in its list of differences;
- ``ado_validate.py judge`` reads every entity of a test at once from stdin (one start-up), as JSON
  ``[{"experiment": <ado experiment id>, "entity": {<ado property>: <value>}}, ...]``, and prints one
  verdict per entity: ``{"valid": bool, "stage": str, "reason": str}``.

The verdict walks the steps ado-sfttrainer 1.8.12's actuator takes before it launches a measurement,
calling ado's code at each (the actuator module itself imports Ray, so its steps are followed here
instead of called; see ``SFTTrainerActuator.prepare_finetune_context`` and
``_cli_args_for_measurement`` in ``ado_actuators/sfttrainer/actuators.py``):

1. ``experiment``: the experiment is one that ado-sfttrainer's experiment modules register.
2. ``domain``: ``Experiment.validate_entity``: the entity's values lie in the experiment's property
   domains (an ado discovery space only holds such entities).
3. ``parameters``: ``experiment_parameters_from_experiment`` builds the experiment's parameters
   (e.g. GPTQ-LoRA's ``torch_dtype`` must be float16).
4. ``entity-space``: ``EntitySpace.model_validate`` of the entity completed with those parameters.
5. ``validate_and_update``: ado's is_valid rules (``InvalidEntityError``).
6. ``arguments``: the dataset and model are known, and ``args_for_entity_space`` can build the
   trainer arguments (the weights the experiment loads exist, LoRA has target modules, GPTQ's
   triton_v2 kernel gets float16).

A step that raises stops the walk: ``valid`` is false and ``reason`` holds ado's message.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from typing import Any


class _Catalog:
    """Stands in for ado-core's ExperimentCatalog: the experiment modules only call ``addExperiment``."""

    def __init__(self) -> None:
        self.experiments: dict[str, Any] = {}

    def addExperiment(self, experiment: Any) -> None:
        self.experiments[experiment.identifier] = experiment


def _experiments() -> dict[str, Any]:
    from ado_actuators.sfttrainer.experiments import full_finetune, gptq_lora, lora, prompt_tuning

    catalog = _Catalog()
    for module in (full_finetune, prompt_tuning, lora, gptq_lora):  # the actuator's _init_catalog order
        module.add_experiments(catalog)
    return catalog.experiments


def _out_of_domain(experiment: Any, values: dict[str, Any]) -> str:
    """Which values lie outside the experiment's domains, for the reason text (the verdict itself
    comes from ``validate_entity``)."""
    properties = {p.identifier: p for p in (*experiment.requiredConstitutiveProperties, *experiment.optionalProperties)}
    missing = [p for p in properties if p not in values and p in {r.identifier for r in experiment.requiredProperties}]
    bad = [
        f"{name}={value!r} not in {properties[name].propertyDomain.compact_representation(max_items=6)}"
        for name, value in values.items()
        if name in properties and not properties[name].propertyDomain.valueInDomain(value)
    ]
    return "; ".join([*(f"{m} is required" for m in missing), *bad]) or "validate_entity refused it"


def judge(experiments: dict[str, Any], experiment_id: str, values: dict[str, Any]) -> dict[str, Any]:
    """ado's verdict on one entity (module docstring: the steps)."""
    from ado.schema.entity import Entity
    from ado.schema.property import ConstitutivePropertyDescriptor
    from ado.schema.property_value import ConstitutivePropertyValue
    from ado_actuators.sfttrainer.experiments import common

    def refused(stage: str, reason: object) -> dict[str, Any]:
        return {"valid": False, "stage": stage, "reason": str(reason)}

    experiment = experiments.get(experiment_id)
    if experiment is None:
        return refused("experiment", f"unknown experiment {experiment_id}; ado has {sorted(experiments)}")

    entity = Entity(
        constitutive_property_values=tuple(
            ConstitutivePropertyValue(property=ConstitutivePropertyDescriptor(identifier=name), value=value)
            for name, value in values.items()
        )
    )
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        in_domain = experiment.validate_entity(entity)  # it prints its reasons; ours are _out_of_domain's
    if not in_domain:
        return refused("domain", _out_of_domain(experiment, values))

    entity_values = experiment.propertyValuesFromEntity(entity)
    try:
        parameters = common.experiment_parameters_from_experiment(experiment, entity_values=entity_values)
    except Exception as error:
        return refused("parameters", error)
    # As the actuator does: the experiment's parameters fill the entity space's fields the entity
    # leaves out (e.g. the stability experiment's max_steps).
    for name, value in dict(parameters).items():
        if name in common.EntitySpace.model_fields:
            entity_values.setdefault(name, value)
    try:
        space = common.EntitySpace.model_validate(entity_values)
    except Exception as error:
        return refused("entity-space", error)
    try:
        space.validate_and_update(exp_params=parameters, logger=logging.getLogger("ado"))
    except common.InvalidEntityError as error:
        return refused("validate_and_update", error)

    if space.dataset_id not in common.DatasetMap:
        return refused("arguments", f"unknown dataset {space.dataset_id}")
    model_map = common.ModelMap.get(space.model_name)
    if model_map is None:
        return refused("arguments", f"unknown model {space.model_name}")
    try:
        parameters.args_for_entity_space(space, model_map=model_map)
    except (common.InvalidEntityError, NotImplementedError) as error:
        return refused("arguments", error)
    return {"valid": True, "stage": "", "reason": ""}


def domains(experiments: dict[str, Any]) -> dict[str, dict[str, dict[str, list[Any]]]]:
    """Every experiment's constitutive property domains (required and optional)."""
    described: dict[str, dict[str, dict[str, list[Any]]]] = {}
    for identifier, experiment in experiments.items():
        props = described.setdefault(identifier, {})
        for prop in (*experiment.requiredConstitutiveProperties, *experiment.optionalProperties):
            domain = prop.propertyDomain
            if domain.values is not None:
                props[prop.identifier] = {"values": list(domain.values)}
            elif domain.domainRange is not None:
                props[prop.identifier] = {"range": [min(domain.domainRange), max(domain.domainRange)]}
            else:
                props[prop.identifier] = {"values": domain.domain_values()}  # binary: [False, True]
    return described


def lora_models(experiments: dict[str, Any]) -> dict[str, list[str]]:
    """The models each LoRA experiment has target modules for (its hardcoded target_modules_map)."""
    found = {i: e.metadata.get("parameters", {}).get("target_modules_map") for i, e in experiments.items()}
    return {i: sorted(targets) for i, targets in found.items() if targets is not None}


def main() -> None:
    experiments = _experiments()
    if sys.argv[1:] == ["domains"]:
        json.dump({"domains": domains(experiments), "lora_models": lora_models(experiments)}, sys.stdout)
    elif sys.argv[1:] == ["judge"]:
        json.dump([judge(experiments, r["experiment"], r["entity"]) for r in json.load(sys.stdin)], sys.stdout)
    else:
        sys.exit("usage: ado_validate.py domains | judge < entities.json")


if __name__ == "__main__":
    main()
