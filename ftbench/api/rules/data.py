"""Rules that a spec can train at all, from the catalog's facts about its dataset and model.

Everything here would otherwise pass validation and `kubectl apply`, start pods, load the model
and then fail (or train on nothing) inside the training library: too few entries for one
optimizer step, a sequence length that truncates every response away, or one beyond what the
model was built for. The catalog knows the numbers (datasets.yaml `entries`, `promptTokensMin`;
models.yaml `maxPositionEmbeddings`), so the refusal comes before any pod, with them in the message.
A user-extended catalog may leave a fact unset: then that check is skipped, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ftbench.api import effective
from ftbench.api.rules.rule import Rule, RuleFamily
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

    @family.rule(
        "data.rows-train",
        "modelMaxLength",
        "the rows that keep a trained token at modelMaxLength fill one optimizer step (exact where the catalog has "
        "the model's prompt lengths: the generated tiny model on the character datasets)",
    )
    def rows_fill_a_step(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        rows = rows_that_train(s, c)
        return too_few_rows(s, rows) if rows is not None else None

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


@dataclass(frozen=True)
class RowsThatTrain:
    """How many of a dataset's entries keep a trained token at a spec's modelMaxLength (exact: the catalog's
    prompt lengths come from the trainer's own tokenizer and generator; tests/trainer hold them against a run)."""

    offered: int
    trained: int
    lengths: dict[int, int]  # prompt tokens -> entries

    def sentence(self, spec: FineTuneExperimentSpec) -> str:
        cut = self.offered - self.trained
        if not cut:
            return f"{self.trained} of {self.offered} entries keep a trained token at modelMaxLength {spec.model_max_length}"
        return (
            f"{self.trained} of {self.offered} entries keep a trained token at modelMaxLength {spec.model_max_length}; "
            f"the other {cut} ({100 * cut / self.offered:.0f} %) have prompts that fill it (engine trl drops them, "
            f"fms-hf-tuning trains them with every label ignored); above {max(self.lengths)} every entry trains"
        )


def too_few_rows(spec: FineTuneExperimentSpec, rows: RowsThatTrain) -> str | None:
    """Why the rows that train cannot fill one optimizer step, with the shortest length that does; None when they
    can (rule data.rows-train; the operator's check of the predictor's count)."""
    needed = effective.global_batch_size(spec)
    if rows.trained >= needed:
        return None
    return (
        f"{rows.trained} of the {rows.offered} entries of {spec.dataset_id} keep a trained token at this length under "
        f"{spec.model}'s tokenizer (the others' prompts fill the length, so truncation "
        f"cuts their response away), but one optimizer step takes batchSize x gradientAccumulationSteps = "
        f"{needed}; use modelMaxLength {_fill(rows.lengths, needed)} or more (above {max(rows.lengths)} every entry "
        "trains)"
    )


def rows_that_train(
    spec: FineTuneExperimentSpec, catalog: Catalog, lengths: Mapping[int, int] | None = None
) -> RowsThatTrain | None:
    """From `lengths` (the predictor's count under the model's tokenizer) or the catalog's table; None where
    neither knows the prompt lengths of the spec's model and dataset."""
    lengths = dict(lengths) if lengths else catalog.prompt_lengths(spec.model, spec.dataset_id)
    if not lengths:
        return None
    trained = sum(n for tokens, n in lengths.items() if tokens < spec.model_max_length)
    return RowsThatTrain(offered=sum(lengths.values()), trained=trained, lengths=lengths)


def describe_rows(spec: FineTuneExperimentSpec, catalog: Catalog) -> str:
    """The data a run will train on, in words (`ftbench validate`, `ftbench run`)."""
    rows = rows_that_train(spec, catalog)
    if rows is not None:
        return f"{spec.dataset_id}: {rows.sentence(spec)}"
    return (
        f"{spec.dataset_id}: the entries that keep a trained token at modelMaxLength {spec.model_max_length} are "
        f"counted before the run with {spec.model}'s own tokenizer where it is beside the model's config.json "
        f"(`ftbench predict`, and the operator's predictor before it creates anything: status.prediction.rowsTrained, "
        f"refused with reason TooFewTrainedRows where they cannot fill one optimizer step), and exactly when the run "
        f"starts (status.results.rowsTrained)"
    )


def _fill(lengths: dict[int, int], needed: int) -> int:
    """The shortest modelMaxLength at which `needed` entries keep a trained token."""
    total = 0
    for tokens in sorted(lengths):
        total += lengths[tokens]
        if total >= needed:
            return tokens + 1
    return max(lengths) + 1


def _next_power_of_two(n: int) -> int:
    return 1 << n.bit_length()
