"""Fitting the device-level memory terms on ado's fleet (`bench/fleet.py fit` and `tabulate`): the constants,
the rows held out of the fit two ways, the bands and the calibration domain ftbench.predict.constants states."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ftbench.api.prediction_report import DeviceMemory
from ftbench.api.profile import DEFAULT_GPU_MEMORY
from ftbench.catalog import load_catalog
from ftbench.contracts.prediction import MemoryPrediction
from ftbench.predict.constants import GIB, DeviceConstants
from ftbench.predict.device_memory import device_features, device_memory
from ftbench.predict.fit_folds import Bands, error_bands, grouped_folds, models_left_out
from ftbench.predict.fleet_accuracy import GROUPED, MODEL_LEFT_OUT, architecture_key
from ftbench.stats.flops import gpu_family


@dataclass(frozen=True)
class Judged:
    """One fleet row beside its prediction: what it did, what ado measured, the device-level terms."""

    line: int
    spec: dict[str, Any]
    outcome: str | None  # ran, oom, None (unclear)
    measured_percent: float | None
    device: DeviceMemory | None
    prediction: MemoryPrediction | None
    reason: str | None  # why there is no prediction
    partner: str | None = None  # what the same configuration's other experiment did: ran, failed


def fit_constants(judged: list[Judged]) -> DeviceConstants:
    """Least absolute deviations of measured - tensors over the device-level terms' causes (the median error is
    what the fleet's check asks for, and a few rows that ran far from every model would pull a least-squares
    fit), on rows that ran below the saturation the allocator shows near the card's capacity (above ~95 % it
    gives its cache back). The context is the cluster profile's per-GPU-model constant (`gpuMemory.runtimeOverhead`,
    a setting users change), so it is taken as set and the fit sizes the other terms beside it."""
    import numpy as np  # the fit's alone: the prediction needs no numpy

    xs, ys, names = [], [], []
    for j in judged:
        if j.device is None or j.prediction is None or j.measured_percent is None or j.measured_percent > 95:
            continue
        capacity = j.device.capacity_bytes
        features = device_features(j.prediction)
        names = sorted(features)
        xs.append([features[k] for k in names])
        # The unsharded gradients are counted at their size (one copy), not fitted; the context is the profile's.
        known = j.device.tensor_bytes + j.device.term("unshardedGradients") + j.device.term("context")
        ys.append((j.measured_percent / 100 * capacity - known) / GIB)
    x, y = np.array(xs), np.array(ys)
    weights = np.ones(len(y))
    for _ in range(100):  # iteratively reweighted least squares towards the L1 fit
        coef, *_ = np.linalg.lstsq(x * weights[:, None], y * weights, rcond=None)
        weights = 1 / np.sqrt(np.maximum(np.abs(y - x @ coef), 1e-3))
    return DeviceConstants.of_fit({name: float(c) for name, c in zip(names, coef, strict=True)})


def held_out(judged: list[Judged], split: dict[int, str]) -> list[Judged]:
    """Each predicted row again, its device-level terms sized by constants fitted without its part of `split`."""
    out = {j.line: j for j in judged}
    for part in sorted(set(split.values())):
        constants = fit_constants([j for j in judged if split.get(j.line) != part])
        for j in judged:
            if split.get(j.line) == part and j.prediction is not None:
                gpu = DEFAULT_GPU_MEMORY[j.spec["gpuModel"]]
                out[j.line] = dataclasses.replace(j, device=device_memory(j.prediction, gpu, constants))
    return [out[j.line] for j in judged]


def out_of_sample(judged: list[Judged]) -> dict[str, list[Judged]]:
    """The rows as the fleet's constants predict them (in sample), then held out two ways."""
    specs = {j.line: j.spec for j in judged}
    return {
        "in sample": judged,
        GROUPED: held_out(judged, grouped_folds(specs)),
        MODEL_LEFT_OUT: held_out(judged, models_left_out(specs)),
    }


def bands(judged: list[Judged], by_kind: bool = True) -> Bands:
    """ftbench.predict.constants' MEMORY_*BANDS: per scope and model kind (and per scope over both kinds), the
    rows that ran and their median and 90th percentile |predicted - measured| in percentage points, of the rows
    as given (`out_of_sample`'s held-out predictions)."""
    errors = [
        (j.spec, j.prediction.world_size, j.prediction.nodes, abs(j.device.percent - j.measured_percent))
        for j in judged
        if j.device is not None and j.prediction is not None and j.measured_percent is not None
    ]
    return error_bands(errors, load_catalog(), by_kind)


def all_bands(held: dict[str, list[Judged]]) -> dict[str, Bands]:
    """What predictions quote: the grouped folds' bands for a model the fleet has, the model-left-out bands (per
    scope) for one it has not."""
    return {"MEMORY_BANDS": bands(held[GROUPED]), "MEMORY_UNSEEN_MODEL_BANDS": bands(held[MODEL_LEFT_OUT], False)}


def calibration_domain(judged: list[Judged]) -> dict[str, Any]:
    """ftbench.predict.constants' FLEET_*: what the rows that ran and calibrated the fits cover."""
    models = load_catalog().models
    ran = [j.spec for j in judged if j.measured_percent is not None and j.device is not None]
    archs = {architecture_key(models[s["model"]].architecture) for s in ran}
    return {
        "FLEET_MODELS": tuple(sorted({s["model"] for s in ran})),
        "FLEET_GPU_FAMILIES": tuple(sorted({gpu_family(s["gpuModel"]) for s in ran})),
        "FLEET_ARCHITECTURES": tuple(sorted(a for a in archs if a)),
        "FLEET_RELEASES": tuple(f"fms-hf-tuning {v}" for v in sorted({s["fmsHfTuningVersion"] for s in ran})),
        "FLEET_MAX_GPUS": max(s["numberGpus"] for s in ran),
        "FLEET_MAX_NODES": max(s["numberNodes"] for s in ran),
        "FLEET_SEQUENCE": (min(s["modelMaxLength"] for s in ran), max(s["modelMaxLength"] for s in ran)),
    }
