"""The test rig as a cluster: nodes that look like a profile's, the kubelet's placement options, pod
DNS across nodes, the scheduler's configuration, and the profile's schedulerName in what is rendered.

Pure parts only; tests/e2e runs them together with the real kube-scheduler on two nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftbench.api.profile import ClusterProfile, Features
from ftbench.api.runtime_choice import preferred_runtime, profile_refusals
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts.enums import Runtime
from ftbench.render.manifests import render_experiment
from ftbench_devcluster import hosts as H
from ftbench_devcluster.control_plane import scheduler_config
from ftbench_devcluster.kubelet.cli import build_parser
from ftbench_devcluster.kubelet.node import node_status
from ftbench_devcluster.rig import RigNode, taints


def test_a_rig_node_carries_what_the_profile_says_a_node_has() -> None:
    profile = ClusterProfile.model_validate(
        {
            "nodeSelector": {"pool": "training"},
            "gpuResource": "example.com/gpu",
            "roce": {"network": "multi-nic-network", "deviceCount": 4},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "team", "operator": "Equal", "value": "ml"},
                {"operator": "Exists"},  # tolerates everything: no taint needs it
            ],
        }
    )
    args = RigNode(gpus=8, gpu_model="NVIDIA-H100-80GB-HBM3", memory="2Ti").kubelet_args(profile)
    parsed = build_parser().parse_args(["--kubeconfig", "k", "--state-dir", "d", "--no-bind", *args])
    assert dict(parsed.label) == {"pool": "training", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert dict(parsed.resource) == {"example.com/gpu": "8", "nvidia.com/roce_gdr": "4", "memory": "2Ti"}
    assert parsed.taint == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "team", "value": "ml", "effect": "NoSchedule"},
    ]
    assert parsed.no_bind
    assert taints(ClusterProfile()) == [] and "--resource" in RigNode().kubelet_args(ClusterProfile())


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--resource", "nvidia.com/gpu=lots"),
        ("--resource", "novalue"),
        ("--taint", "key=v:Sometimes"),
        ("--taint", "k"),
    ],
)
def test_the_kubelet_refuses_a_malformed_resource_or_taint(option: str, value: str) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--kubeconfig", "k", "--state-dir", "d", option, value])


def test_advertised_quantities_win_over_the_machine() -> None:
    status = node_status("n", cpus=2, memory=1024, gpus=0, kernel="k", machine="x86_64", extra={"memory": "1Ti"})
    assert status["capacity"]["memory"] == "1Ti" and status["capacity"]["cpu"] == "2"
    assert status["allocatable"] == status["capacity"]


def test_pods_of_other_nodes_resolve_once_they_have_an_address() -> None:
    pod = {
        "metadata": {"name": "job-0-x", "namespace": "ns", "labels": {"job-name": "job"},
                     "annotations": {H.COMPLETION_INDEX_ANNOTATION: "0"}},
        "spec": {"nodeName": "b", "subdomain": "job"},
        "status": {"phase": "Running", "podIP": "127.150.0.2"},
    }  # fmt: skip
    address = H.api_pod_address(pod)
    assert address is not None and address.ip == "127.150.0.2" and address.hostname == "job-0"
    assert "job-0.job.ns.svc.cluster.local" in H.hosts_content([address])
    assert H.api_pod_address({**pod, "status": {"phase": "Pending"}}) is None
    assert H.api_pod_address({**pod, "status": {"phase": "Succeeded", "podIP": "127.150.0.2"}}) is None


def test_the_scheduler_serves_one_name_without_leader_election(tmp_path: Path) -> None:
    config = scheduler_config("rig", tmp_path / "kubeconfig", "127.0.0.1:1234")
    assert config["profiles"] == [{"schedulerName": "rig"}] and config["leaderElection"] == {"leaderElect": False}
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"  # what 1.20's kube-scheduler reads
    assert config["healthzBindAddress"] == config["metricsBindAddress"] == "127.0.0.1:1234"  # not 0.0.0.0:10251


def _spec(**fields: object) -> FineTuneExperimentSpec:
    base = {"model": "llama-7b", "numberGpus": 16, "numberNodes": 2, "gpuModel": "NVIDIA-A100-SXM4-80GB",
            "batchSize": 16, "modelMaxLength": 2048, "datasetId": "news-tokens-16384plus-entries-4096"}  # fmt: skip
    return FineTuneExperimentSpec.model_validate({**base, **fields})


def test_every_training_pod_names_the_profiles_scheduler() -> None:
    profile = ClusterProfile(scheduler_name="volcano", features=Features(training_operator=True))
    objects = render_experiment(_spec(), load_catalog(), profile, name="e", namespace="ns").objects
    templates = [o["spec"]["pytorchReplicaSpecs"][r]["template"] for o in objects if o["kind"] == "PyTorchJob"
                 for r in ("Master", "Worker")]  # fmt: skip
    assert templates and all(t["spec"]["schedulerName"] == "volcano" for t in templates)
    plain = render_experiment(
        _spec(), load_catalog(), ClusterProfile(features=Features(training_operator=True)), name="e", namespace="ns"
    )
    assert "schedulerName" not in str(plain.objects)


def test_a_scheduler_name_keeps_auto_off_trainjob_and_refuses_it_by_name() -> None:
    catalog = load_catalog()
    trainer = Features(trainer_v2=True, training_operator=True)
    assert preferred_runtime(_spec(), catalog, ClusterProfile(features=trainer)).runtime == Runtime.TRAIN_JOB
    named = ClusterProfile(features=trainer, scheduler_name="volcano")
    assert preferred_runtime(_spec(), catalog, named).runtime == Runtime.PYTORCH_JOB
    [refusal] = profile_refusals(_spec(run={"runtime": "TrainJob"}), catalog, named)
    assert refusal.field == "run.runtime" and "schedulerName volcano" in refusal.message
    assert "ClusterTrainingRuntime" in refusal.message
