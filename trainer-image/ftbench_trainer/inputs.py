"""Where a plan's model and dataset are on this machine: the two things a run reads besides its plan.

The worker trains with them and the memory predictor reads the model's config.json; both ask here, so
neither imports the other (the trainer's sub-packages form no circle: docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path

from ftbench.contracts.plan import LaunchPlan


def resolve_model(plan: LaunchPlan) -> str:
    """plan.model.ref as a local path or hub id; for the `generated` tiny model, where it is built for this
    stack (plan.model.ref, or a writable cache when that is read-only and holds another transformers major's)."""
    if plan.model.generated:
        from ftbench_trainer.tiny_model import tiny_model_for_this_stack

        return str(tiny_model_for_this_stack(plan.model.ref))
    if plan.model.ref.startswith("/") and not Path(plan.model.ref).exists():
        # Otherwise from_pretrained reads the path as a hub id and says "Repo id must be in the form ...".
        raise FileNotFoundError(
            f"weights of model {plan.model.name} not found at {plan.model.ref}: put them on the models volume "
            "(cluster profile storage.models / modelRoot) or point the model at them with a model map"
        )
    return plan.model.ref


def resolve_dataset(plan: LaunchPlan) -> tuple[str, bool]:
    """(the dataset file, whether this run generated it): plan.dataset.path, else seed 002's
    <dataDir>/<id>.jsonl|parquet (e.g. ado's file), else ftbench's generated file."""
    if plan.dataset.path:
        return plan.dataset.path, False
    from ftbench_trainer.datasets import resolve_dataset_file, seed_002_file

    if not plan.dataset.generate_if_missing and seed_002_file(plan.dataset.id, plan.data_dir) is None:
        raise FileNotFoundError(
            f"dataset {plan.dataset.id} is not at {plan.data_dir}/{plan.dataset.id}.jsonl|parquet and "
            "generateIfMissing is false; put the file there or allow generating it"
        )
    path, generated = resolve_dataset_file(
        plan.dataset.id, plan.dataset.generator, plan.data_dir, entries=plan.dataset.entries
    )
    return str(path), generated
