"""The shapes `ftbench predict --min-gpus` tries: ado autoconf's question, answered with the memory prediction.

"What is the fewest GPUs this fits on, and the largest batch that fits on the GPUs I have?" The second is answered
at doublings only (the largest of batchSize x 1, 2, 4, ... that fits), and named so. The spec's
batchSize is ado's global batch (one forward/backward pass over all devices), so more GPUs mean fewer rows
per device and more sharding: the candidates are the spec at 1, 2, 4, ... GPUs (batchSize must stay a
multiple of the GPU count, ado's is_valid.1), on as many nodes as the profile's GPUs per node need (8 where
the profile does not say), and the spec at batchSize x 1, 2, 4, ... on its own GPUs. Every candidate goes
through the same validation as a spec a user writes (a shape the rules refuse is not offered). `search` walks
each question in order and stops it at its answer: the GPU counts up to the first that fits (the fewest, whatever
the counts after it), the doublings up to the first that does not (memory grows with the batch, so none after it
would). A resident predictor is asked round by round (each round's shapes in one question), so the doublings
beyond the first that does not fit are never traced: under trl, whose fused LM head scores a doubling's tokens in
twice the tiles, those were most of the time. Without one, one predictor process answers every candidate and
the same walk reads the answer, so both give the same shapes and the same count tried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import validate_spec_dict
from ftbench.catalog import Catalog

DEFAULT_GPUS_PER_NODE = 8
MAX_GPUS = 64  # the fleet's largest runs are 32 GPUs; twice that is the search's ceiling
MAX_BATCH_DOUBLINGS = 8


@dataclass(frozen=True)
class Shape:
    """One candidate: the spec at another GPU count or batch size."""

    question: str  # "gpus" or "batch"
    spec: FineTuneExperimentSpec

    def describe(self) -> str:
        s = self.spec
        nodes = f" on {s.number_nodes} nodes" if s.number_nodes > 1 else ""
        return f"{s.number_gpus} GPU(s){nodes}, batchSize {s.batch_size}"


def candidate_shapes(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> list[Shape]:
    return [*gpu_shapes(spec, catalog, profile), *batch_shapes(spec, catalog, profile)]


def gpu_shapes(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> list[Shape]:
    """The spec at 1, 2, 4, ... GPUs (those that divide its batchSize), on the nodes they need. One GPU is one
    process: the distributed settings (distributedBackend, fsdp*), which the rules refuse there as not
    applied, are left out of that shape."""
    per_node = profile.gpus_per_node or DEFAULT_GPUS_PER_NODE
    wire = spec.to_wire()
    single = {k: v for k, v in wire.items() if not is_distributed_setting(k)}
    shapes: list[Shape] = []
    gpus = 1
    while gpus <= min(MAX_GPUS, spec.batch_size):
        if spec.batch_size % gpus == 0:
            nodes = -(-gpus // per_node)
            base = single if gpus == 1 else wire
            shapes += _valid("gpus", {**base, "numberGpus": gpus, "numberNodes": nodes}, catalog, profile)
        gpus *= 2
    return shapes


def is_distributed_setting(key: str) -> bool:
    """A spec field that only applies across processes (refused on one GPU as not applied)."""
    return key == "distributedBackend" or key.startswith("fsdp")


def batch_shapes(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> list[Shape]:
    """The spec at batchSize x 1, 2, 4, ... on its own GPUs."""
    wire = spec.to_wire()
    shapes: list[Shape] = []
    for doubling in range(MAX_BATCH_DOUBLINGS + 1):
        shapes += _valid("batch", {**wire, "batchSize": spec.batch_size << doubling}, catalog, profile)
    return shapes


def _valid(question: str, wire: dict[str, object], catalog: Catalog, profile: ClusterProfile) -> list[Shape]:
    report = validate_spec_dict(wire, catalog, profile=profile)
    return [Shape(question, report.spec)] if report.ok and report.spec is not None else []


@dataclass(frozen=True)
class ShapeAnswer:
    fewest: Shape | None  # the fewest GPUs predicted to fit at the spec's batchSize
    largest: Shape | None  # the largest batchSize predicted to fit on the spec's GPUs
    tried: int

    def sentences(self) -> list[tuple[str, str]]:
        return [
            ("fewest GPUs that fit (estimate)", self.fewest.describe() if self.fewest else "none of those tried fits"),
            (
                "largest batchSize x 1, 2, 4, ... that fits (estimate)",
                self.largest.describe() + " (the next doubling does not fit or was not tried; a batch between the "
                "two was not tried)"
                if self.largest
                else "none tried fits",
            ),
        ]


def search(
    spec: FineTuneExperimentSpec,
    catalog: Catalog,
    profile: ClusterProfile,
    predict: Callable[[list[Shape]], list[bool | None]],
    *,
    in_rounds: bool,
) -> ShapeAnswer:
    """The fewest GPUs and the largest doubling that fit, each question walked in order and stopped at its answer;
    `predict` gives each shape's verdict (None: none), asked once for every candidate, or with `in_rounds` once
    per round for the next shape of each open question."""
    queues = {"gpus": gpu_shapes(spec, catalog, profile), "batch": batch_shapes(spec, catalog, profile)}
    known: dict[int, bool | None] = {}
    if not in_rounds:
        every = [shape for queue in queues.values() for shape in queue]
        known = dict(zip(map(id, every), predict(every), strict=True))
    tried: list[Shape] = []
    fits: list[bool | None] = []
    while asked := [queue.pop(0) for queue in queues.values() if queue]:
        missing = [shape for shape in asked if id(shape) not in known]
        if missing:
            known.update(zip(map(id, missing), predict(missing), strict=True))
        for shape in asked:
            fit = known[id(shape)]
            tried.append(shape)
            fits.append(fit)
            if (shape.question == "gpus") == bool(fit):  # the fewest that fits, or the first doubling that does not
                queues[shape.question].clear()
    return answer(tried, fits)


def answer(shapes: Sequence[Shape], fits: Sequence[bool | None]) -> ShapeAnswer:
    """`fits[i]`: shape i fits (None: no verdict, e.g. no prediction)."""
    gpus = [s for s, f in zip(shapes, fits, strict=True) if s.question == "gpus" and f]
    batch = [s for s, f in zip(shapes, fits, strict=True) if s.question == "batch" and f]
    return ShapeAnswer(
        fewest=min(gpus, key=lambda s: s.spec.number_gpus, default=None),
        largest=max(batch, key=lambda s: s.spec.batch_size, default=None),
        tried=len(shapes),
    )
