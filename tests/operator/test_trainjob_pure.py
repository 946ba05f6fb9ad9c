"""The operator's pure parts for Kubeflow Trainer v2: detection, Kueue queueing, per-trial TrainJobs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from operator_testkit import success_result

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.status import FineTuneExperimentStatus, Phase
from ftbench.catalog import load_catalog
from ftbench.contracts.conditions import ConditionType
from ftbench.contracts.enums import Runtime
from ftbench.render.manifests import render_experiment
from ftbench_operator import children
from ftbench_operator import status as st
from ftbench_operator.classify import classify_run
from ftbench_operator.classify_trials import classify_trials
from ftbench_operator.profile_source import ProfileSource
from ftbench_operator.reasons import QUEUED_REASON
from ftbench_operator.summaries import ContainerState, PodSummary, summarize_workload

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
MULTI = FineTuneExperimentSpec.model_validate(
    {"model": "llama3.1-8b", "modelMaxLength": 2048, "numberGpus": 16, "numberNodes": 2, "batchSize": 16}
)


def trainjob(suspend: bool = False, conditions: list[dict] | None = None) -> dict:
    return {
        "kind": "TrainJob",
        "metadata": {"name": "x-a0"},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions or []},
    }


@pytest.mark.parametrize(
    ("pytorchjob_crd", "runtimes", "profile", "runtime"),
    [
        (False, None, "", Runtime.INDEXED_JOB),  # neither: Indexed Job + headless Service
        (True, None, "", Runtime.PYTORCH_JOB),  # v1 only
        (False, frozenset({"torch-distributed"}), "", Runtime.TRAIN_JOB),  # v2 only
        (True, frozenset({"torch-distributed"}), "", Runtime.TRAIN_JOB),  # both: v2 wins
        (True, frozenset(), "", Runtime.PYTORCH_JOB),  # v2 CRDs without the named runtime
        (True, frozenset({"torch-distributed"}), "trainJob: {runtimeName: mine}", Runtime.PYTORCH_JOB),
        (False, frozenset({"mine"}), "trainJob: {runtimeName: mine}", Runtime.TRAIN_JOB),
        (True, frozenset({"torch-distributed"}), "runtime: PyTorchJob", Runtime.PYTORCH_JOB),  # pinned
    ],
)
def test_detection_of_each_crd_combination(
    tmp_path, pytorchjob_crd: bool, runtimes: frozenset[str] | None, profile: str, runtime: Runtime
) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(profile)
    source = ProfileSource(path)
    source.set_server_features(31, training_operator=pytorchjob_crd, training_runtimes=runtimes)
    current = source.current()
    rendered = render_experiment(MULTI, load_catalog(), current, name="x")
    assert rendered.runtime == runtime, rendered.reason


def test_suspended_trainjob_is_pending_and_queued() -> None:
    queued = summarize_workload(trainjob(suspend=True))
    assert queued.suspended
    obs = classify_run([queued], [], workload_missing=False, now=NOW)
    assert (obs.phase, obs.reason) == (Phase.PENDING, QUEUED_REASON) and "Kueue" in obs.message
    suspended = summarize_workload(trainjob(conditions=[{"type": "Suspended", "status": "True"}]))
    assert classify_run([suspended], [], workload_missing=False, now=NOW).reason == QUEUED_REASON
    admitted = summarize_workload(trainjob(conditions=[{"type": "Suspended", "status": "False"}]))
    assert classify_run([admitted], [], workload_missing=False, now=NOW).reason == "NoPods"  # admitted, no pod yet

    builder = st.StatusBuilder({}, 1, NOW)
    first = builder.observed(obs, trials=1)
    assert first["phase"] == "Pending"
    (cond,) = [c for c in first["conditions"] if c["type"] == ConditionType.QUEUED]
    assert cond["status"] == "True" and cond["reason"] == QUEUED_REASON
    FineTuneExperimentStatus.model_validate(first)
    running = PodSummary("x-a0-node-0-0-abcde", "Running", "t", container=ContainerState("running"))
    later = st.StatusBuilder(first, 1, NOW).observed(
        classify_run([admitted], [running], workload_missing=False, now=NOW), trials=1
    )
    (cond,) = [c for c in later["conditions"] if c["type"] == ConditionType.QUEUED]
    assert (later["phase"], cond["status"], cond["reason"]) == ("Running", "False", "Admitted")


def test_complete_trainjob_and_rank0_result() -> None:
    done = summarize_workload(
        trainjob(conditions=[{"type": "Complete", "status": "True", "reason": "JobSetCompleted"}])
    )
    assert done.succeeded and not done.suspended
    rank0 = PodSummary(
        "x-a0-node-0-0-abcde",
        "Succeeded",
        "t",
        completion_index=0,
        container=ContainerState("terminated", "Completed", success_result().to_termination_message(), 0),
    )
    rank1 = PodSummary("x-a0-node-0-1-fghij", "Succeeded", "t", completion_index=1, container=ContainerState())
    obs = classify_run([done], [rank1, rank0], workload_missing=False, now=NOW)
    assert obs.phase == Phase.SUCCEEDED and obs.result is not None


def test_one_trainjob_per_trial_starts_with_trial_zero_then_the_next() -> None:
    stability = MULTI.model_copy(update={"experiment": "finetune_full_stability-v1.0.0", "number_nodes": 1})
    profile = ClusterProfile(runtime=Runtime.TRAIN_JOB)
    rendered = render_experiment(stability, load_catalog(), profile, name="x")
    first = children.initial_objects(rendered)
    kinds = ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "TrainJob"]
    assert [o["kind"] for o in first] == kinds and first[-1]["metadata"]["name"] == "x-a0-t0"
    assert children.trial_object(rendered, 3)["metadata"]["name"] == "x-a0-t3"
    assert children.runtime_ref(rendered) == {"name": "TrainJob", "reason": rendered.reason}
    trial0 = summarize_workload({**first[-1], "status": {"conditions": [{"type": "Complete", "status": "True"}]}})
    pod0 = PodSummary(
        "x-a0-t0-node-0-0-abcde",
        "Succeeded",
        "t",
        trial_label=0,
        container=ContainerState("terminated", "Completed", success_result(trial=0).to_termination_message(), 0),
    )
    obs = classify_trials([trial0], [pod0], trials=5, workload_missing=False, one_job_per_trial=True, now=NOW)
    assert obs.next_trial == 1 and len(obs.trials) == 1
