"""`ftbench render`: reviewable YAML on stdout, validation issues on stderr with exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ftbench.cli import main

EXPERIMENT = """apiVersion: ftbench.io/v1alpha1
kind: FineTuneExperiment
metadata: {name: two-nodes, namespace: team}
spec: {model: llama3.1-8b, modelMaxLength: 2048, numberGpus: 16, numberNodes: 2, batchSize: 16,
       gpuModel: NVIDIA-A100-SXM4-80GB, enableRoce: true}
"""
BAD = """apiVersion: ftbench.io/v1alpha1
kind: FineTuneExperiment
metadata: {name: bad}
spec: {model: llama3.1-8b, modelMaxLength: 2048, numberGpus: 2, batchSize: 3, gpuModel: X}
"""


def _objects(out: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(out) if d]


def test_render_prints_multi_document_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    assert main(["render", str(path)]) == 0
    out = capsys.readouterr().out
    kinds = ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service", "Job"]
    assert [o["kind"] for o in _objects(out)] == kinds
    assert all(o["metadata"]["namespace"] == "team" for o in _objects(out))
    assert "two-nodes: runtime IndexedJob" in out and "enableRoce is ignored" not in out


def test_render_runtime_profile_namespace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, profile = tmp_path / "exp.yaml", tmp_path / "profile.yaml"
    path.write_text(EXPERIMENT)
    profile.write_text("roce: {network: multi-nic-network}\n")
    assert main(["render", str(path), "--runtime", "PyTorchJob", "--profile", str(profile), "-n", "other"]) == 0
    objects = _objects(capsys.readouterr().out)
    (job,) = [o for o in objects if o["kind"] == "PyTorchJob"]
    assert job["metadata"]["namespace"] == "other"
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "multi-nic-network"


def test_render_invalid_spec_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    assert main(["render", str(path)]) == 1
    captured = capsys.readouterr()
    assert "bad: invalid" in captured.err and "[is_valid.1]" in captured.err
    assert captured.out == ""


def test_render_impossible_runtime_and_bad_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, profile = tmp_path / "exp.yaml", tmp_path / "profile.yaml"
    path.write_text(EXPERIMENT)
    assert main(["render", str(path), "--runtime", "Job"]) == 1
    assert "which runs one pod, but spec.numberNodes is 2" in capsys.readouterr().err  # validation refuses it first
    profile.write_text("gpuResourse: typo\n")
    assert main(["render", str(path), "--profile", str(profile)]) == 2
    assert "cluster profile" in capsys.readouterr().err


@pytest.mark.parametrize(("runtime", "warned"), [("PyTorchJob", True), ("TrainJob", False), ("IndexedJob", False)])
def test_a_queued_pytorchjob_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], runtime: str, warned: bool
) -> None:
    """Kueue's PyTorchJob integration is off by default and due for removal: queueing one is warned
    about (the objects are still printed); TrainJob and Indexed Jobs are queued as usual."""
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.replace("enableRoce: true}", "enableRoce: true, run: {queueName: gpu-queue}}"))
    assert main(["render", str(path), "--runtime", runtime]) == 0
    out, err = capsys.readouterr()
    assert ("kubeflow.org/pytorchjob integration" in err) == warned
    assert ("# warning: spec.run.queueName 'gpu-queue' with runtime PyTorchJob" in out) == warned
    kinds = {o["kind"] for o in _objects(out)}
    assert {"PyTorchJob": "PyTorchJob", "TrainJob": "TrainJob", "IndexedJob": "Job"}[runtime] in kinds


def test_the_command_of_a_multi_node_spec_runs_on_each_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 44.5: `render --command` of two nodes is a snippet each node runs with its rank and node 0's
    address (it used to print machine_rank 0 and no main_process_ip); without them it stops and says so."""
    import subprocess

    import yaml

    path = tmp_path / "mn.yaml"
    path.write_text(
        "apiVersion: ftbench.io/v1alpha1\nkind: FineTuneExperiment\nmetadata: {name: mn}\nspec: {model: llama3.1-8b, "
        "modelMaxLength: 2048, numberGpus: 16, numberNodes: 2, batchSize: 16, gpuModel: NVIDIA-A100-SXM4-80GB, "
        "engine: fms-hf-tuning, run: {runtime: IndexedJob}}\n"
    )
    assert main(["render", str(path), "--command"]) == 0
    snippet = capsys.readouterr().out
    assert "mn-a0-0.mn-a0 in the IndexedJob's pods" in snippet
    setup = snippet.rsplit("\naccelerate launch", 1)[0]  # everything but the launch itself
    env = {"PATH": "/usr/bin:/bin", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.7"}
    subprocess.run(["bash", "-euc", setup], cwd=tmp_path, env=env, check=True)
    config = yaml.safe_load((tmp_path / "accelerate-config.yaml").read_text())
    assert (config["machine_rank"], config["main_process_ip"], config["num_machines"]) == (1, "10.0.0.7", 2)
    assert config["main_process_port"] == 29500 and config["num_processes"] == 16
    missing = subprocess.run(["bash", "-euc", setup], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, capture_output=True)
    assert missing.returncode != 0 and b"set NODE_RANK to the rank of this node" in missing.stderr
