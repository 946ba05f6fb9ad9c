"""Issue 44.2: the cluster profile is an API, typed and bounded like the spec. What would become an
object the API server or the kubelet refuses is refused where the profile is read (`ftbench
validate/render --profile`, the operator at start-up: tests/operator/test_hardening.py; `helm
install`: tests/ship/test_chart.py), in one line naming each field, its value and what it must be.
Namespaces, labels and annotations of an experiment are checked as the API server checks them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.validation import load_checked_profile, validate_document, validate_spec_dict
from ftbench.cli.main import main

SPEC = {"model": "llama3.1-8b", "modelMaxLength": 1024, "gpuModel": "NVIDIA-A100-SXM4-80GB", "batchSize": 16}


@pytest.mark.parametrize(
    ("profile", "said"),
    [
        ({"defaultMemory": "lots"}, "defaultMemory (value: 'lots'): must be a quantity"),
        ({"podLabels": {"team": "my team!"}}, "podLabels.team (value: 'my team!'): must be a label value"),
        ({"gpuResource": ""}, "gpuResource (value: ''): must be an extended resource name"),
        ({"gpuNodeLabel": ""}, "gpuNodeLabel (value: '')"),
        ({"serviceAccount": "Bad_SA"}, "serviceAccount (value: 'Bad_SA'): must be an object name"),
        ({"images": {"repository": "Registry/My Trainer"}}, "images.repository (value: 'Registry/My Trainer')"),
        ({"images": {"fmsHfTuningTag": "fms {version}"}}, "not an image tag"),
        ({"images": {"fmsHfTuningTag": "fms-{release}"}}, "only {version} may be used"),
        ({"storage": {"models": {"claimName": "m", "mountPath": "/data"}}}, "both mounted at /data"),
        ({"storage": {"models": {"claimName": "m", "mountPath": "/hf-models-pvc", "readOnly": True}}},
         "storage.hfHome /hf-models-pvc/huggingface_home lies on storage.models"),
        ({"storage": {"data": {"claimName": "d", "mountPath": "/data", "readOnly": True}}},
         "storage.dataDir /data/fms-hf-tuning/artificial-dataset lies on storage.data"),
        ({"roce": {"deviceResource": "roce"}}, "roce.deviceResource (value: 'roce')"),
        ({"nodeSelector": {"pool": "gpu nodes"}}, "nodeSelector.pool (value: 'gpu nodes')"),
    ],
)  # fmt: skip
def test_a_profile_the_cluster_would_refuse_is_refused_in_one_line(profile: dict, said: str) -> None:
    with pytest.raises(ValueError) as caught:
        load_checked_profile(yaml.safe_dump(profile), "p.yaml")
    message = str(caught.value)
    assert message.startswith("cluster profile p.yaml is invalid: ") and "\n" not in message
    assert said in message, message


def test_the_cli_says_it_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile, experiment = tmp_path / "p.yaml", tmp_path / "e.yaml"
    profile.write_text("defaultMemory: lots\npodLabels: {team: my team!}\n")
    experiment.write_text(yaml.safe_dump({"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneExperiment",
                                          "metadata": {"name": "e"}, "spec": {**SPEC, "numberGpus": 8}}))  # fmt: skip
    for verb in ("validate", "render"):
        assert main([verb, str(experiment), "--profile", str(profile)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "defaultMemory" in err and "podLabels.team" in err, err


def test_the_readonly_models_volume_of_the_roce_example_keeps_its_caches_elsewhere() -> None:
    """The README's multi-node RoCE example mounts its weights read-only; datasets writes under HF_HOME,
    so the example's profile puts it on the writable data volume (EROFS before)."""
    text = Path("examples/profiles/roce-cluster.yaml").read_text()
    profile = load_checked_profile(text, "roce-cluster.yaml")
    assert profile.storage.models.read_only and profile.storage.hf_home.startswith(profile.storage.data.mount_path)


def test_more_gpus_per_pod_than_a_node_has_is_refused_with_a_node_count_that_fits() -> None:
    """1024 GPUs on one node used to render one pod asking for 1024 GPUs (never scheduled)."""
    profile = ClusterProfile()
    report = validate_spec_dict({**SPEC, "numberGpus": 16, "batchSize": 16}, catalog_for(profile), profile=profile)
    (issue,) = report.issues
    assert issue.rule == "profile.gpus-per-node" and "set numberNodes to 2" in issue.message
    fixed = {**SPEC, "numberGpus": 16, "batchSize": 16, "numberNodes": 2}
    assert validate_spec_dict(fixed, catalog_for(profile), profile=profile).ok
    roomy = ClusterProfile(gpus_per_node=16)
    assert validate_spec_dict({**SPEC, "numberGpus": 16}, catalog_for(roomy), profile=roomy).ok


@pytest.mark.parametrize(
    ("metadata", "path"),
    [
        ({"name": "e", "namespace": "Bad_NS"}, "metadata.namespace"),
        ({"name": "e", "labels": {"team": "my team!"}}, "metadata.labels.team"),
        ({"name": "e", "labels": {"my team": "x"}}, "metadata.labels"),
        ({"name": "e", "labels": {"n": 3}}, "metadata.labels.n"),
        ({"name": "e", "annotations": {"bad key!": "x"}}, "metadata.annotations"),
        ({"name": "e", "annotations": {"big": "x" * 300_000}}, "metadata.annotations"),
    ],
)
def test_metadata_is_checked_as_the_api_server_checks_it(metadata: dict, path: str) -> None:
    doc = {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneExperiment", "metadata": metadata,
           "spec": {**SPEC, "numberGpus": 8}}  # fmt: skip
    assert [i.path for i in validate_document(doc).issues] == [path]


def test_render_checks_the_namespace_it_is_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment = tmp_path / "e.yaml"
    experiment.write_text(yaml.safe_dump({"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneExperiment",
                                          "metadata": {"name": "e"}, "spec": {**SPEC, "numberGpus": 8}}))  # fmt: skip
    assert main(["render", str(experiment), "-n", "Bad_NS"]) == 1
    assert "metadata.namespace (value: 'Bad_NS')" in capsys.readouterr().err
