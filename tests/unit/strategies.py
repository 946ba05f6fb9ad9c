"""Hypothesis strategies for FineTuneExperiment specs, shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from ftbench.catalog import load_catalog
from ftbench.contracts.enums import (
    AttentionImplementation,
    DistributedBackend,
    Engine,
    Experiment,
    FsdpShardingStrategy,
    Runtime,
    TorchDtype,
)
from ftbench.engines.releases import FMS_HF_TUNING_VERSIONS

CATALOG = load_catalog()


def wire_specs() -> st.SearchStrategy[dict]:
    """Type-correct specs with values around every rule's boundary (valid and invalid ones)."""
    required = {
        "model": st.sampled_from([*sorted(CATALOG.models), "not-a-model"]),
        "modelMaxLength": st.integers(1, 8192),
        "numberGpus": st.integers(0, 16),
        "batchSize": st.integers(1, 64),
    }
    optional = {
        "experiment": st.sampled_from([e.value for e in Experiment]),
        "engine": st.sampled_from([e.value for e in Engine]),
        "gpuModel": st.sampled_from(["", "NVIDIA-A100-SXM4-80GB"]),
        "numberNodes": st.integers(1, 4),
        "fastMoe": st.integers(0, 8),
        "torchDtype": st.sampled_from([d.value for d in TorchDtype]),
        "distributedBackend": st.sampled_from([b.value for b in DistributedBackend]),
        "r": st.integers(1, 64),
        "loraAlpha": st.integers(1, 64),
        "targetModules": st.lists(st.sampled_from(["q_proj", "v_proj", "k_proj"]), min_size=1, max_size=3),
        "fastKernels": st.lists(st.booleans(), min_size=3, max_size=3),
        "maxSteps": st.integers(-1, 10),
        "numTrainEpochs": st.sampled_from([0.5, 1.0, 2.0]),
        "stopAfterSeconds": st.sampled_from([-1.0, 0.0, 30.0]),
        "fmsHfTuningVersion": st.sampled_from(list(FMS_HF_TUNING_VERSIONS)),
        "datasetId": st.sampled_from(sorted(CATALOG.datasets)),
        "gradientAccumulationSteps": st.integers(1, 8),
        "fsdpShardingStrategy": st.sampled_from([s.value for s in FsdpShardingStrategy]),
        "bf16": st.booleans(),
        "enableRoce": st.booleans(),
        "repeats": st.integers(1, 4),
        "attentionImplementation": st.sampled_from([a.value for a in AttentionImplementation]),
        "run": st.fixed_dictionaries(
            {},
            optional={
                "networkPreflight": st.sampled_from(["auto", "on", "off"]),
                "requireRoce": st.booleans(),
                "runtime": st.sampled_from([r.value for r in Runtime]),
                "priorityClassName": st.sampled_from(["high"]),
            },
        ),
    }
    return st.fixed_dictionaries(required, optional=optional)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
