"""What a sweep will cost before it starts: GPU-hours at the predicted throughput (an estimate).

Each valid point's run time comes from its spec's stop settings at the predicted step time
(ftbench.predict.throughput.run_time); the sweep's total sums them. Points without a prediction (CPU ranks,
a GPU model or architecture ftbench cannot size) are counted apart, so the total never passes a partial
sum off as the whole. Points predicted not to fit are left out and counted apart, as far as the memory
prediction has judged them: `ftbench predict SWEEP` predicts every point first; the operator leaves out the
points its children's predictions (made as each starts) and the OOM frontier rule out, and counts the points
not yet judged; `ftbench validate` has no memory prediction and prices every point, and the sentence says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ftbench.api.sweep import PointPhase, PointRow
from ftbench.catalog import Catalog
from ftbench.predict.throughput import predict_throughput, run_time
from ftbench.sweep.points import SweepPoint
from ftbench.sweep.schedule import RunState


@dataclass(frozen=True)
class SweepCost:
    gpu_hours_estimate: float
    training_hours_estimate: float  # one point after another (a sweep runs `parallelism` at a time)
    priced: int
    unpriced: int
    predicted_oom: int | None = None  # None: the memory prediction was not consulted
    unverified: int = 0  # priced points the memory prediction has not judged yet

    def sentence(self) -> str:
        if not self.priced:
            return f"no prediction for its {self.unpriced} point(s) (CPU ranks, or no GPU peak or architecture)"
        line = (
            f"predicted {self.gpu_hours_estimate:.3g} GPU-hours ({self.training_hours_estimate:.3g} h of training, "
            f"points one after another; estimate, model loading not included) for {self.priced} point(s)"
        )
        if self.unpriced:
            line += f"; {self.unpriced} point(s) without a prediction (CPU ranks, or no GPU peak or architecture)"
        if self.predicted_oom is None:
            line += "; points predicted not to fit are included (the memory prediction: ftbench predict SWEEP)"
        elif self.predicted_oom:
            line += f"; {self.predicted_oom} point(s) predicted not to fit are left out"
        if self.predicted_oom is not None and self.unverified:
            line += f"; {self.unverified} point(s) not yet predicted are included"
        return line


def sweep_cost(
    points: Sequence[SweepPoint], catalog: Catalog, fits: Mapping[int, bool | None] | None = None
) -> SweepCost:
    """`fits[point index]`: the memory prediction's verdict (False: predicted not to fit, not priced)."""
    gpu_hours = hours = 0.0
    priced = unpriced = oom = unverified = 0
    for point in points:
        if point.spec is None or not point.valid:
            continue
        if fits is not None and fits.get(point.index) is False:
            oom += 1
            continue
        throughput = predict_throughput(point.spec, catalog)
        if throughput is None:
            unpriced += 1
            continue
        estimate = run_time(point.spec, catalog, throughput)
        gpu_hours += estimate.gpu_hours_estimate
        hours += estimate.seconds_estimate / 3600.0
        priced += 1
        unverified += fits is not None and fits.get(point.index) is None
    return SweepCost(gpu_hours, hours, priced, unpriced, None if fits is None else oom, unverified)


def observed_fits(rows: Sequence[PointRow], runs: Sequence[RunState]) -> dict[int, bool | None]:
    """What the sweep knows of its points' memory so far: a child's verdict (status.prediction.fit.fits, made
    when it started; any repeat predicted not to fit decides), and the points the OOM frontier skipped."""
    fits: dict[int, bool | None] = {}
    for run in runs:
        if run.predicted_fits is not None and fits.get(run.point) is not False:
            fits[run.point] = run.predicted_fits
    for row in rows:
        if row.phase == PointPhase.SKIPPED:
            fits[row.point] = False
    return fits
