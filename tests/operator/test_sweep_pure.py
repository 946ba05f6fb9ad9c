"""The sweep controller's pure parts: children read as runs, reuse matching, child bodies, metrics."""

from __future__ import annotations

from operator_testkit import TEST_PROFILE, lora_spec
from prometheus_client import CollectorRegistry, generate_latest

from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import FineTuneSweepSpec
from ftbench.sweep.points import expand
from ftbench.sweep.schedule import NewRun, plan_sweep
from ftbench_operator.handlers.handle_sweep import child_body, reuse_candidates, run_state, sweep_owner
from ftbench_operator.metrics import OperatorMetrics

PROFILE = ClusterProfile.model_validate(TEST_PROFILE)
SWEEP = {
    "apiVersion": "ftbench.io/v1alpha1",
    "kind": "FineTuneSweep",
    "metadata": {"name": "sw", "namespace": "ns", "uid": "sweep-uid"},
}
RESULTS = {
    "trainRuntimeSeconds": 10.0,
    "trainSteps": 5,
    "trainSamples": 40,
    "trainTokens": 12345,
    "trainNonPaddingTokens": 12000,
    "trainSamplesPerSecond": 4.0,
    "trainStepsPerSecond": 0.5,
    "trainTokensPerSecond": 99.0,
    "trainTokensPerGpuPerSecond": 99.0,
    "datasetTokensPerSecond": 90.0,
    "datasetTokensPerSecondPerGpu": 90.0,
}


SPEC = {"template": lora_spec(), "matrix": {"batchSize": [4, 8]}}


def points():
    return expand(FineTuneSweepSpec.model_validate(SPEC), catalog_for(PROFILE)).points


def child(name: str, point: int, status: dict, owner: str = "sweep-uid", labels: bool = True) -> dict:
    meta_labels = {"ftbench.io/sweep": "sw", "ftbench.io/sweep-point": str(point), "ftbench.io/sweep-repeat": "0"}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": meta_labels if labels else {},
            "ownerReferences": [{"kind": "FineTuneSweep", "apiVersion": "ftbench.io/v1alpha1", "name": "sw",
                                 "uid": owner, "controller": True}],
        },
        "status": status,
    }  # fmt: skip


def test_a_gpu_oom_child_reads_as_an_oom_run():
    oom = {
        "phase": "Invalid",
        "invalidReason": "GpuOutOfMemory: CUDA out of memory",
        "message": "CUDA out of memory",
        "conditions": [{"type": "Succeeded", "status": "False", "reason": "GpuOutOfMemory"}],
    }
    run = run_state(child("sw-p0-r0", 0, oom))
    assert run is not None and run.gpu_oom and (run.point, run.repeat) == (0, 0)
    done = run_state(child("sw-p1-r0", 1, {"phase": "Succeeded", "results": RESULTS}))
    assert done is not None and done.metrics is not None and done.metrics.train_tokens_per_second == 99.0
    assert run_state(child("x", 0, {}, labels=False)) is None
    pending = run_state(child("sw-p1-r0", 1, {}))
    assert pending is not None and pending.phase is None and not pending.finished


def test_a_childs_network_preflight_reaches_its_point():
    network = {"backend": "nccl", "transport": "ib", "linkLayer": "RoCE", "ranks": 16, "warmupIterations": 2,
               "iterations": 10, "seconds": 4.0, "peakBusBandwidthGbps": 45.0}  # fmt: skip
    refused = {"phase": "Invalid", "invalidReason": "RoceNotInEffect: ...", "environment": {"engine": "trl",
               "network": network | {"transport": "socket", "linkLayer": "", "peakBusBandwidthGbps": 9.0}}}  # fmt: skip
    done = {"phase": "Succeeded", "results": RESULTS, "environment": {"engine": "trl", "network": network}}
    runs = [run_state(child("sw-p0-r0", 0, done)), run_state(child("sw-p1-r0", 1, refused))]
    assert runs[0] is not None and runs[0].network is not None and runs[0].network.peak_bus_bandwidth_gbps == 45.0
    assert runs[1] is not None and runs[1].network is not None  # a refused run shows what it had instead
    spec = FineTuneSweepSpec.model_validate({"template": lora_spec(), "matrix": {"batchSize": [4, 8]}})
    rows = plan_sweep(spec, points(), [r for r in runs if r is not None]).rows
    assert [(r.transport, r.peak_bus_bandwidth_gbps) for r in rows] == [("ib (RoCE)", 45.0), ("socket", 9.0)]


def test_reuse_matches_effective_spec_and_image_not_own_children():
    pts = points()
    assert pts[0].spec is not None
    image = PROFILE.images.image_for(pts[0].spec.engine, pts[0].spec.fms_hf_tuning_version)
    accepted = FineTuneExperimentSpec.model_validate(dict(pts[0].wire)).to_wire()
    finished = {"phase": "Succeeded", "acceptedSpec": accepted, "environment": {"image": image}, "results": RESULTS}
    other = child("earlier", 0, finished, owner="another-sweep")
    own = child("sw-p0-r0", 0, finished)
    wrong_image = child("old-image", 0, {**finished, "environment": {"image": "elsewhere:trl"}}, owner="x")
    found = reuse_candidates(pts, [own, wrong_image, other], PROFILE, "sweep-uid")
    assert list(found) == [0] and found[0].name == "earlier" and found[0].metrics.train_tokens_per_second == 99.0
    assert reuse_candidates(pts, [own], PROFILE, "sweep-uid") == {}


def test_child_body_is_labelled_and_controlled_by_the_sweep():
    body = child_body(SWEEP, FineTuneSweepSpec.model_validate(SPEC), NewRun(points()[1], 0))
    meta = body["metadata"]
    assert meta["name"] == "sw-p1-r0" and meta["namespace"] == "ns"
    assert meta["labels"]["ftbench.io/sweep-point"] == "1" and meta["labels"]["ftbench.io/sweep"] == "sw"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "ftbench"
    (ref,) = meta["ownerReferences"]
    assert (ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == ("sweep-uid", True, True)
    assert body["spec"]["batchSize"] == 8
    # skipPredictedOom (default true): a point predicted not to fit is refused before any pod starts.
    assert body["spec"]["run"]["oomPrecheck"] == "refuse"
    run_anyway = FineTuneSweepSpec.model_validate({**SPEC, "skipPredictedOom": False})
    assert child_body(SWEEP, run_anyway, NewRun(points()[1], 0))["spec"]["run"]["oomPrecheck"] == "warn"
    assert sweep_owner(body) == "sw"
    assert sweep_owner({"metadata": {"ownerReferences": []}}) is None


def test_sweep_metrics_follow_the_status_and_go_with_the_sweep():
    metrics = OperatorMetrics(CollectorRegistry())
    status = {
        "counts": {"total": 3, "succeeded": 2, "skipped": 1},
        "best": {"metric": "trainTokensPerSecond", "value": 12.5, "point": 0},
    }
    metrics.observe_sweep({**SWEEP, "status": status})
    text = generate_latest(metrics.registry).decode()
    assert 'ftbench_sweep_points{namespace="ns",phase="Succeeded",sweep="sw"} 2.0' in text
    assert 'ftbench_sweep_points{namespace="ns",phase="Skipped",sweep="sw"} 1.0' in text
    assert 'ftbench_sweep_best{metric="trainTokensPerSecond",namespace="ns",sweep="sw"} 12.5' in text
    metrics.forget_sweep("ns", "sw")
    text = generate_latest(metrics.registry).decode()
    assert 'sweep="sw"' not in text


def test_null_and_empty_matrix_values_are_refused_with_axis_and_index():
    spec = FineTuneSweepSpec.model_validate(
        {
            "template": lora_spec(),
            "matrix": {"batchSize": [4, None], "run.queueName": ["q", ""], "targetModules": [[]]},
            "include": [{"gpuModel": None}],
        }
    )
    expansion = expand(spec, catalog_for(PROFILE))
    assert expansion.points == ()
    refused = {(i.path, i.rule) for i in expansion.issues}
    assert refused == {
        ("spec.matrix.batchSize[1]", "sweep.empty-value"),
        ("spec.matrix.run.queueName[1]", "sweep.empty-value"),
        ("spec.matrix.targetModules[0]", "sweep.empty-value"),
        ("spec.include[0].gpuModel", "sweep.empty-value"),
    }
    assert all("remove it, or write the value to run" in i.message for i in expansion.issues)
