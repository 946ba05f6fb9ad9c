"""Rules that a spec can train at all, from the catalog's facts about its dataset and model.

Everything here would otherwise pass validation and `kubectl apply`, start pods, load the model
and then fail (or train on nothing) inside the training library: too few entries for one
optimizer step, a sequence length that truncates every response away, or one beyond what the
model was built for. The catalog knows the numbers (datasets.yaml `entries`, `promptTokensMin`;
models.yaml `maxPositionEmbeddings`), so the refusal comes before any pod, with them in the message.
A user-extended catalog may leave a fact unset: then that check is skipped, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterator

from ftbench.api import effective
from ftbench.api.rule import Rule, RuleFamily
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog, DatasetEntry


def data_rules() -> Iterator[Rule]:
    family = RuleFamily()

    @family.dataset_rule(
        "data.whole-step",
        "batchSize",
        "the dataset holds at least batchSize x gradientAccumulationSteps entries (one whole optimizer step)",
    )
    def whole_step(s: FineTuneExperimentSpec, dataset: DatasetEntry) -> str | None:
        needed = s.batch_size * s.gradient_accumulation_steps
        if dataset.entries >= needed:
            return None
        smallest = max(1, s.number_gpus)  # batchSize is a multiple of numberGpus (is_valid.1)
        fit = dataset.entries // s.gradient_accumulation_steps // smallest * smallest
        how = (
            f"lower batchSize (at most {fit} with this accumulation) or gradientAccumulationSteps"
            if fit >= smallest  # a fix that can be followed: no batch below the smallest one
            else f"lower gradientAccumulationSteps (at most {dataset.entries // smallest} with batchSize {smallest})"
        )
        return (
            f"datasetId {s.dataset_id} has {dataset.entries} entries, but one optimizer step takes batchSize "
            f"{s.batch_size} x gradientAccumulationSteps {s.gradient_accumulation_steps} = {needed}, so not one "
            f"whole step can run; {how}, or use a dataset with more entries"
        )

    @family.dataset_rule(
        "data.response-fits",
        "modelMaxLength",
        "modelMaxLength is longer than the dataset's prompts (some response token survives truncation)",
    )
    def response_survives(s: FineTuneExperimentSpec, dataset: DatasetEntry) -> str | None:
        if dataset.prompt_tokens_min is None or s.model_max_length > dataset.prompt_tokens_min:
            return None
        return (
            f"modelMaxLength {s.model_max_length} cuts every entry of {s.dataset_id} before its response (each "
            f"prompt has at least {dataset.prompt_tokens_min} tokens), so no token is left to train on; use "
            f"modelMaxLength above {dataset.prompt_tokens_min} (e.g. {_next_power_of_two(dataset.prompt_tokens_min)})"
        )

    @family.rule("model.positions", "modelMaxLength", "modelMaxLength is within the model's max_position_embeddings")
    def within_positions(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        model = effective.model_of(s, c)
        limit = model.max_position_embeddings if model is not None else None
        if limit is None or s.model_max_length <= limit:
            return None
        return (
            f"modelMaxLength {s.model_max_length} is beyond model {s.model}'s {limit} position embeddings "
            f"(max_position_embeddings): positions past it were never trained, and models with learned position "
            f"tables fail on them; use modelMaxLength {limit} or less, or a model built for longer sequences"
        )

    return iter(family.rules)


def _next_power_of_two(n: int) -> int:
    return 1 << n.bit_length()
