"""The shapes `ftbench predict --min-gpus` tries (ftbench.api.shapes): valid specs only, answered in order."""

from __future__ import annotations

from ftbench.api.profile import ClusterProfile
from ftbench.api.shapes import answer, candidate_shapes, search
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog

SPEC = FineTuneExperimentSpec.model_validate(
    {
        "model": "llama3.1-8b",
        "numberGpus": 8,
        "gpuModel": "NVIDIA-A100-SXM4-80GB",
        "batchSize": 16,
        "modelMaxLength": 2048,
    }
)


def test_gpu_counts_divide_the_batch_and_nodes_follow_the_profile() -> None:
    two_nodes = SPEC.model_copy(update={"number_nodes": 2})  # 8 GPUs on nodes of 4
    shapes = candidate_shapes(two_nodes, load_catalog(), ClusterProfile.model_validate({"gpusPerNode": 4}))
    gpus = [(s.spec.number_gpus, s.spec.number_nodes) for s in shapes if s.question == "gpus"]
    assert gpus == [(1, 1), (2, 1), (4, 1), (8, 2), (16, 4)]
    batches = [s.spec.batch_size for s in shapes if s.question == "batch"]
    # Doubled while validation accepts them: at 2048 x 4 accumulation steps one step needs more than the
    # dataset's 4096 entries (data.whole-step), so the search stops at 1024.
    assert batches == [16 << k for k in range(7)]
    assert all(s.spec.number_nodes == 2 for s in shapes if s.question == "batch")


def test_the_answer_is_the_fewest_gpus_and_the_largest_batch_that_fit() -> None:
    shapes = candidate_shapes(SPEC, load_catalog(), ClusterProfile())
    fits = [(s.question == "gpus" and s.spec.number_gpus >= 4) or (s.question == "batch" and s.spec.batch_size <= 64)
            for s in shapes]  # fmt: skip
    got = answer(shapes, fits)
    assert got.fewest is not None and got.fewest.spec.number_gpus == 4
    assert got.largest is not None and got.largest.spec.batch_size == 64
    nothing = answer(shapes, [None] * len(shapes))
    assert nothing.fewest is None and "none" in nothing.sentences()[0][1]


def test_the_search_stops_each_question_at_its_answer_in_rounds_or_at_once() -> None:
    """Round by round (a resident predictor) the GPU counts stop at the first that fits and the doublings at the
    first that does not, so the rest is never asked; at once (one process) every candidate is asked and the same
    walk reads the answers: the same shapes and count tried."""
    catalog, profile = load_catalog(), ClusterProfile()

    def verdicts(asked: list[list[tuple[str, int]]]):
        def predict(shapes: list) -> list[bool | None]:
            asked.append([(s.question, s.spec.number_gpus if s.question == "gpus" else s.spec.batch_size)
                          for s in shapes])  # fmt: skip
            return [s.spec.number_gpus >= 4 if s.question == "gpus" else s.spec.batch_size <= 64 for s in shapes]

        return predict

    rounds: list[list[tuple[str, int]]] = []
    once: list[list[tuple[str, int]]] = []
    by_rounds = search(SPEC, catalog, profile, verdicts(rounds), in_rounds=True)
    at_once = search(SPEC, catalog, profile, verdicts(once), in_rounds=False)
    assert by_rounds == at_once
    assert by_rounds.fewest is not None and by_rounds.fewest.spec.number_gpus == 4
    assert by_rounds.largest is not None and by_rounds.largest.spec.batch_size == 64
    assert by_rounds.tried == 3 + 4  # GPUs 1, 2, 4; batch 16, 32, 64, 128 (the first that does not fit)
    assert rounds == [[("gpus", 1), ("batch", 16)], [("gpus", 2), ("batch", 32)], [("gpus", 4), ("batch", 64)],
                      [("batch", 128)]]  # fmt: skip
    assert len(once) == 1 and len(once[0]) == len(candidate_shapes(SPEC, catalog, profile))
