"""Fitting the throughput model on ado's fleet (`bench/fleet_throughput.py fit` and `tabulate`): FITTED's
constants together, the GPU families' shares from ftbench's own runs, the rows held out of the fit two ways and
the bands ftbench.predict.constants states.

Levenberg-Marquardt on log tokens/s over every clean row that ran, Huber-weighted (rows farther than HUBER in
log from the fit weigh less: ado's table has configurations measured twice at rates 2-12x apart), from a fixed
neutral start.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ftbench.catalog import load_catalog
from ftbench.predict.constants import FITTED, ThroughputConstants
from ftbench.predict.fit_folds import Bands, error_bands, grouped_folds, models_left_out
from ftbench.predict.fleet_accuracy import GROUPED, MODEL_LEFT_OUT
from ftbench.predict.throughput import StepModel

HUBER: Final = 0.3
LAYER_COSTS: Final = ("one_gpu_full", "one_gpu_peft", "sharded_full", "sharded_peft")


@dataclass(frozen=True)
class Point:
    """One fleet row that ran: its spec, ado's steady tokens/s and what the prediction knows of its step."""

    line: int
    spec: dict[str, Any]
    measured: float  # ado's dataset_tokens_per_second
    model: StepModel

    @property
    def gpus(self) -> int:
        return int(self.spec["numberGpus"])

    @property
    def nodes(self) -> int:
        return int(self.spec["numberNodes"])

    def error(self, predicted: float) -> float:
        return abs(predicted - self.measured) / self.measured


@dataclass(frozen=True)
class OwnRun:
    """One of ftbench's own runs on a lent GPU (`gpu_efficiency`'s evidence)."""

    store: str
    experiment: str
    measured: float  # the run's steady tokens/s
    model: StepModel


def _constants(theta: Any) -> ThroughputConstants:
    """The parameter vector as ThroughputConstants: efficiency coefficients as they are, the rest as logs."""
    names = list(FITTED.efficiency)
    k = len(names)
    # clipped: a constant no row of a fold depends on (a model left out) may drift without bound
    rest = [math.exp(min(max(float(v), -60.0), 60.0)) for v in theta[k:]]
    return ThroughputConstants(
        efficiency={n: float(theta[i]) for i, n in enumerate(names)},
        layer_seconds=dict(zip(LAYER_COSTS, rest[:4], strict=True)),
        expert_seconds=rest[4],
        expert_token_seconds=rest[5],
        expert_full_factor=rest[6],
        rdma_bytes=rest[7],
        tcp_bytes=rest[8],
        expert_parallel_seconds=rest[9],
    )


def _start() -> list[float]:
    coefficients = [-0.5 if n in ("dense", "moe", "hybrid") else 0.0 for n in FITTED.efficiency]
    return coefficients + [math.log(v) for v in (5e-3, 5e-3, 5e-3, 5e-3, 1e-4, 1e-8, 1.0, 40e9, 8e9, 5e-3)]


def _log_errors(pts: Sequence[Point], constants: ThroughputConstants) -> Any:
    import numpy as np

    return np.array([math.log(p.model.step_tokens / p.model.seconds(constants).step / p.measured) for p in pts])


def fit_points(pts: Sequence[Point], iterations: int = 100) -> ThroughputConstants:
    """Levenberg-Marquardt with a forward-difference Jacobian, Huber weights recomputed every iteration."""
    import numpy as np  # the fit's alone: the prediction needs no numpy

    theta, damping = np.array(_start()), 1e-2
    residual = _log_errors(pts, _constants(theta))
    for _ in range(iterations):
        jacobian = np.empty((len(pts), len(theta)))
        for j in range(len(theta)):
            moved = theta.copy()
            moved[j] += 1e-5
            jacobian[:, j] = (_log_errors(pts, _constants(moved)) - residual) / 1e-5
        size = np.abs(residual)
        weights = np.sqrt(np.where(size < HUBER, 1.0, HUBER / np.maximum(size, 1e-12)))
        a = jacobian * weights[:, None]
        h = a.T @ a
        step = np.linalg.solve(h + damping * np.diag(np.diag(h) + 1e-12), -a.T @ (residual * weights))
        trial = _log_errors(pts, _constants(theta + step))
        if np.sum((weights * trial) ** 2) < np.sum((weights * residual) ** 2):
            theta, residual, damping = theta + step, trial, damping / 3
        else:
            damping *= 4
    return _constants(theta)


def _sig(value: float) -> float:
    return float(f"{value:.2g}")


def fitted(pts: Sequence[Point], own: Sequence[OwnRun]) -> ThroughputConstants:
    """FITTED as the fleet and ftbench's own runs give it, rounded as ftbench.predict.constants states it."""
    c = fit_points(pts)
    rounded = ThroughputConstants(
        efficiency={n: round(v, 3) for n, v in c.efficiency.items()},
        layer_seconds={n: _sig(v) for n, v in c.layer_seconds.items()},
        expert_seconds=_sig(c.expert_seconds),
        expert_token_seconds=_sig(c.expert_token_seconds),
        expert_full_factor=_sig(c.expert_full_factor),
        rdma_bytes=_sig(c.rdma_bytes),
        tcp_bytes=_sig(c.tcp_bytes),
        expert_parallel_seconds=_sig(c.expert_parallel_seconds),
    )
    return dataclasses.replace(rounded, gpu_efficiency=fit_gpu_efficiency(own, rounded))


def fit_gpu_efficiency(runs: Sequence[OwnRun], constants: ThroughputConstants) -> dict[str, float]:
    """Per GPU family, the median share of the A100-calibrated efficiency its runs reached: the compute time
    the model predicts over the compute time the measured step leaves once overhead and communication are
    taken out."""
    base = dataclasses.replace(constants, gpu_efficiency={})
    shares: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        t = run.model.seconds(base)
        measured_step = run.model.step_tokens / run.measured
        shares[run.model.gpu_family].append(t.compute / (measured_step - t.overhead - t.exposed))
    return {family: round(statistics.median(values), 3) for family, values in sorted(shares.items())}


def held_out_errors(pts: Sequence[Point], split: dict[int, str]) -> list[float]:
    """Each row's error when the constants are fitted without its part of `split` (grouped_folds: whole
    configurations; models_left_out: whole models)."""
    errors: dict[int, float] = {}
    for part in sorted(set(split.values())):
        constants = fit_points([p for p in pts if split[p.line] != part])
        for p in pts:
            if split[p.line] == part:
                errors[p.line] = p.error(p.model.step_tokens / p.model.seconds(constants).step)
    return [errors[p.line] for p in pts]


def validated(pts: Sequence[Point]) -> dict[str, list[float]]:
    """Each row's error in sample, under grouped folds and with its model left out."""
    specs = {p.line: p.spec for p in pts}
    return {
        "in sample": [p.error(p.model.predict(p.gpus).tokens_per_second_estimate) for p in pts],
        GROUPED: held_out_errors(pts, grouped_folds(specs)),
        MODEL_LEFT_OUT: held_out_errors(pts, models_left_out(specs)),
    }


def throughput_bands(pts: Sequence[Point], errors: list[float], by_kind: bool) -> Bands:
    """ftbench.predict.constants' THROUGHPUT_*BANDS: per scope (and model kind) the rows and their median and
    90th percentile error in percent."""
    rows = [(p.spec, p.gpus, p.nodes, 100 * e) for p, e in zip(pts, errors, strict=True)]
    return error_bands(rows, load_catalog(), by_kind)
