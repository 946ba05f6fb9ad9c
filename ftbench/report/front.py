"""A sweep's Pareto front: the measured points no other beats on tokens/s, GPUs and memory headroom at once.

A point is on the front when no other measured point has at least its tokens/s, at most its GPUs and at least
its memory headroom (100 - peak GPU memory %), and more of one of them; headroom is compared only where both
points measured it (CPU runs have none). Beside each point its predicted tokens/s (an estimate: ftbench.api.
throughput), so a search's choices can be held against what they measured. The best point is also written as
a ready FineTuneExperiment (`<sweep>-best.yaml`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftbench.api.resource import API_VERSION, KIND
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.predict.throughput import predict_throughput
from ftbench.report.data import SweepData

MEASURED = ("Succeeded", "Reused")
XLABEL, YLABEL = "GPUs (1 for a CPU run)", "train tokens/s per GPU"


@dataclass(frozen=True)
class FrontPoint:
    """A measured point as the front compares it."""

    point: int
    values: dict[str, Any]
    gpus: int  # 1 for a CPU run
    tokens_per_second: float
    headroom_percent: float | None  # 100 - peak GPU memory %; None on CPU
    predicted_tokens_per_second: float | None

    @property
    def tokens_per_gpu(self) -> float:
        return self.tokens_per_second / self.gpus

    def dominates(self, other: FrontPoint) -> bool:
        headroom = self.headroom_percent is None or other.headroom_percent is None
        at_least = (
            self.tokens_per_second >= other.tokens_per_second
            and self.gpus <= other.gpus
            and (headroom or (self.headroom_percent or 0.0) >= (other.headroom_percent or 0.0))
        )
        better = (
            self.tokens_per_second > other.tokens_per_second
            or self.gpus < other.gpus
            or (not headroom and (self.headroom_percent or 0.0) > (other.headroom_percent or 0.0))
        )
        return at_least and better


def measured_points(sweep: SweepData, catalog: Catalog) -> list[FrontPoint]:
    out = []
    for row in sweep.rows:
        spec = sweep.point_specs.get(row.point)
        if str(row.phase) not in MEASURED or row.train_tokens_per_second is None or spec is None:
            continue
        predicted = predict_throughput(spec, catalog)
        peak = row.gpu_memory_peak_percent
        out.append(
            FrontPoint(
                point=row.point,
                values=dict(row.values),
                gpus=max(1, spec.number_gpus),
                tokens_per_second=row.train_tokens_per_second,
                headroom_percent=None if peak is None else 100.0 - peak,
                predicted_tokens_per_second=predicted.tokens_per_second_estimate if predicted else None,
            )
        )
    return out


def pareto_front(points: list[FrontPoint]) -> list[FrontPoint]:
    """The points no other dominates, by GPUs then tokens/s."""
    front = [p for p in points if not any(q.dominates(p) for q in points if q is not p)]
    return sorted(front, key=lambda p: (p.gpus, -p.tokens_per_second))


def best_experiment(sweep: SweepData, point: int, name: str) -> dict[str, Any] | None:
    """The point's spec as a FineTuneExperiment document (`kubectl apply -f`, `ftbench run`, `ftbench render`)."""
    spec: FineTuneExperimentSpec | None = sweep.point_specs.get(point)
    if spec is None:
        return None
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec.to_wire()}
