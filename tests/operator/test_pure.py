"""Unit tests of the operator's pure parts: classification, status builders, metrics, settings."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from operator_testkit import failed_result, oom_result, success_result
from prometheus_client import CollectorRegistry, generate_latest

from ftbench.api.status import FineTuneExperimentStatus, Phase
from ftbench.contracts.bounded import MESSAGE_MAX, bounded
from ftbench.contracts.conditions import ConditionType
from ftbench.contracts.environment import RunEnvironment
from ftbench.contracts.network import NetworkInEffect, NetworkTransport
from ftbench.contracts.quality import NoiseFlag
from ftbench.contracts.results import EXIT_GPU_OOM, REASON_NETWORK_CHECKED, Outcome, TrainerResult
from ftbench.contracts.trainer_status import TrainerStatusReport
from ftbench_operator import status as st
from ftbench_operator.__main__ import argv
from ftbench_operator.classify import Observation, classify_run, explain_no_pods, pending_too_long
from ftbench_operator.classify_trials import classify_trials
from ftbench_operator.metrics import OperatorMetrics
from ftbench_operator.profile_source import ProfileSource
from ftbench_operator.settings import OperatorSettings
from ftbench_operator.summaries import (
    ContainerState,
    PodSummary,
    WorkloadSummary,
    rank_of,
    summarize_pod,
    summarize_workload,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
JOB = WorkloadSummary(kind="Job", name="x-a0")


def pod(name="p", phase="Running", state="running", exit_code=None, reason="", message="", **kw) -> PodSummary:
    return PodSummary(
        name=name,
        phase=phase,
        created="2026-01-01T11:00:00Z",
        start_time="2026-01-01T11:00:00Z",
        container=ContainerState(state, reason, message, exit_code),
        **kw,
    )


def terminated(result, exit_code=0, **kw) -> PodSummary:
    return pod(
        phase="Succeeded" if exit_code == 0 else "Failed",
        state="terminated",
        exit_code=exit_code,
        message=result.to_termination_message() if result else "",
        **kw,
    )


def run(pods, workloads=(JOB,), missing=False, grace=300.0):
    return classify_run(workloads, pods, workload_missing=missing, now=NOW, image_pull_grace_seconds=grace)


@pytest.mark.parametrize(
    ("pods", "workloads", "phase", "reason"),
    [
        ([], (JOB,), Phase.PENDING, "NoPods"),
        ([pod(phase="Pending", state="")], (JOB,), Phase.PENDING, "Pending"),
        ([pod()], (JOB,), Phase.RUNNING, "Running"),
        ([terminated(success_result())], (JOB,), Phase.SUCCEEDED, "ResultsRecorded"),
        ([terminated(oom_result(), 42)], (JOB,), Phase.INVALID, "GpuOutOfMemory"),
        ([pod(phase="Failed", state="terminated", exit_code=42)], (JOB,), Phase.INVALID, "GpuOutOfMemory"),
        ([terminated(failed_result(), 1)], (JOB,), Phase.FAILED, "TrainingError"),
        (
            [pod(phase="Failed", state="terminated", exit_code=137, reason="OOMKilled")],
            (JOB,),
            Phase.FAILED,
            "OOMKilled",
        ),
        ([pod(phase="Failed", state="", reason="")], (JOB,), Phase.FAILED, "PodFailed"),
        ([PodSummary("p", "Failed", "2026-01-01T11:00:00Z", reason="Evicted")], (JOB,), Phase.FAILED, "Evicted"),
        ([pod(state="terminated", exit_code=0, message="not json")], (JOB,), Phase.FAILED, "NoResult"),
        (
            [pod()],
            (WorkloadSummary("Job", "x-a0", failed=True, reason="DeadlineExceeded"),),
            Phase.FAILED,
            "DeadlineExceeded",
        ),
        (
            [],
            (WorkloadSummary("Job", "x-a0", failed=True, reason="PodFailurePolicy"),),
            Phase.INVALID,
            "GpuOutOfMemory",
        ),
        (
            [],
            (WorkloadSummary("Job", "x-a0", failed=True, reason="BackoffLimitExceeded"),),
            Phase.FAILED,
            "BackoffLimitExceeded",
        ),
        ([], (WorkloadSummary("Job", "x-a0", succeeded=True),), Phase.FAILED, "NoResult"),
        ([pod(phase="Pending", state="waiting", reason="InvalidImageName")], (JOB,), Phase.FAILED, "ImagePullBackOff"),
    ],
)
def test_classify_run(pods, workloads, phase, reason):
    obs = run(pods, workloads)
    assert (obs.phase, obs.reason) == (phase, reason), obs.message


def test_result_wins_over_deadline_and_deletion_is_first():
    assert (
        run(
            [terminated(success_result())], (WorkloadSummary("Job", "j", failed=True, reason="DeadlineExceeded"),)
        ).phase
        == Phase.SUCCEEDED
    )
    assert run([terminated(success_result())], missing=True).reason == "ChildDeleted"


def test_image_pull_fails_only_after_the_grace_period():
    waiting = pod(phase="Pending", state="waiting", reason="ImagePullBackOff")
    assert run([waiting], grace=7200).phase == Phase.PENDING
    assert run([waiting], grace=7200).reason == "ImagePullBackOff"  # said at once, while Pending
    assert run([waiting], grace=60).reason == "ImagePullBackOff"


def test_pending_past_the_deadline_fails_with_the_last_reason():
    """Issue 12: nothing hangs Pending forever; the reason is reported at once, then at the deadline."""
    stuck = pod(phase="Pending", state="", unschedulable="0/3 nodes are available: 3 Insufficient cpu.")
    obs = run([stuck])
    assert (obs.phase, obs.reason) == (Phase.PENDING, "Unschedulable") and "Insufficient cpu" in obs.message
    created = WorkloadSummary("Job", "j", created=st.timestamp(NOW - timedelta(seconds=100)))
    assert pending_too_long(obs, [created], NOW, 300).phase == Phase.PENDING
    assert pending_too_long(obs, [created], NOW, None).phase == Phase.PENDING
    late = pending_too_long(obs, [created], NOW, 60)
    assert (late.phase, late.reason) == (Phase.FAILED, "PendingTimeout") and "Insufficient cpu" in late.message


def test_no_pods_are_explained_by_the_newest_failed_create_event():
    obs = run([])
    assert obs.reason == "NoPods"
    event = {"involvedObject": {"kind": "Job", "name": "j"}, "lastTimestamp": "2026-01-01T00:00:0{}Z"}
    old = {**event, "message": "serviceaccount x not found", "lastTimestamp": "2026-01-01T00:00:01Z"}
    new = {**event, "message": 'pods "j-1" is forbidden: exceeded quota: q', "lastTimestamp": "2026-01-01T00:00:02Z"}
    explained = explain_no_pods(obs, [new, old])
    assert (explained.phase, explained.reason) == (Phase.PENDING, "FailedCreate")
    assert explained.message == 'Job j cannot create pods: pods "j-1" is forbidden: exceeded quota: q'
    assert explain_no_pods(obs, []) == obs
    running = run([pod(phase="Running", state="running")])
    assert explain_no_pods(running, [new]) == running


def test_multi_node_ranks():
    master = pod("m", replica_type="master")
    worker = pod("w", replica_type="worker", replica_index=0)
    assert (
        rank_of(master, 1),
        rank_of(worker, 1),
        rank_of(pod(completion_index=3), 1),
        rank_of(pod(completion_index=3), 5),
    ) == (0, 1, 3, 0)
    done_worker = terminated(None, 0, replica_type="worker", replica_index=0, name="w")
    assert run([master, done_worker]).phase == Phase.RUNNING
    failed_worker = pod("w", "Failed", "terminated", 1, replica_type="worker", replica_index=0)
    obs = run([master, failed_worker])
    assert obs.reason == "PodFailed" and "rank 1" in obs.message


def test_trials_aggregate_and_ask_for_the_next_job():
    trials = [
        terminated(success_result(trial=0), trial_label=0),
        terminated(oom_result(trial=1), trial_label=1, name="p1"),
    ]
    jobs = [
        WorkloadSummary("Job", "x-a0-t0", succeeded=True, trial_label=0),
        WorkloadSummary("Job", "x-a0-t1", succeeded=True, trial_label=1),
    ]
    obs = classify_trials(jobs, trials, trials=5, workload_missing=False, one_job_per_trial=True, now=NOW)
    assert obs.phase == Phase.RUNNING and obs.next_trial == 2
    assert [t.outcome.value for t in obs.trials] == ["Succeeded", "GpuOom"]
    stability = st.stability(obs.trials, 5)
    assert stability["fGpuOom"] == 0.5 and stability["trialsFinished"] == 2
    FineTuneExperimentStatus.model_validate({"stability": stability})  # the CRD's schema


def _repeat_pods(*results):
    return [terminated(r, trial_label=i, name=f"p{i}") for i, r in enumerate(results)]


def test_repeats_end_with_the_mean_and_an_interval_across_them():
    pods = _repeat_pods(success_result(0, 1000.0), success_result(1, 1100.0), success_result(2, 1200.0))
    obs = classify_trials([], pods, trials=3, workload_missing=False, one_job_per_trial=False, now=NOW, repeated=True)
    assert (obs.phase, obs.reason, obs.message) == (Phase.SUCCEEDED, "RepeatsCompleted", "3 repeats finished")
    assert obs.result is not None and obs.result.metrics is not None
    assert obs.result.metrics.train_tokens_per_second == pytest.approx(1100.0)
    done = st.StatusBuilder({}, 1, NOW).observed(obs, trials=3, repeated=True)
    assert "stability" not in done and done["results"]["trainTokensPerSecond"] == 1100.0
    assert done["deviceTime"]["deviceSeconds"] == pytest.approx(3 * 10.0)  # three repeats of 10 s on one device
    repeats = done["repeats"]
    assert (repeats["planned"], repeats["finished"]) == (3, 3)
    assert repeats["steadyStateTokensPerSecond"] == [1000.0, 1100.0, 1200.0]
    assert repeats["cv"] == pytest.approx(100 / 1100)
    half = 4.303 * 100 / 3**0.5  # t(0.975, 2) x stdev / sqrt(3)
    assert (repeats["ci95Low"], repeats["ci95High"]) == pytest.approx((1100 - half, 1100 + half), abs=0.01)
    # the result's interval is the one across repeats, not one run's
    assert done["results"]["steadyStateTokensPerSecondCi95Low"] == pytest.approx(1100 - half, abs=0.01)
    FineTuneExperimentStatus.model_validate(done)  # the CRD's schema


def test_repeats_stop_at_the_precision_target_and_say_so():
    """One Job per repeat: once two repeats agree within the target (+-5 %: 1000 and 1004 give +-2.5 %),
    no third Job is asked for and the experiment succeeds with what ran; apart by 10 %, the next runs."""
    jobs = [WorkloadSummary("Job", f"x-a0-t{i}", succeeded=True, trial_label=i) for i in range(2)]
    close = _repeat_pods(success_result(0, 1000.0), success_result(1, 1004.0))
    obs = classify_trials(jobs, close, trials=4, workload_missing=False, one_job_per_trial=True, now=NOW,
                          repeated=True, precision=0.05)  # fmt: skip
    assert (obs.phase, obs.reason, obs.next_trial) == (Phase.SUCCEEDED, "RepeatsCompleted", None)
    assert obs.message == "2 repeats finished of 4: the interval across them reached targetPrecisionPercent"
    done = st.StatusBuilder({}, 1, NOW).observed(obs, trials=4, repeated=True, precision=0.05)
    repeats = done["repeats"]
    assert (repeats["planned"], repeats["finished"], repeats["stoppedBy"]) == (4, 2, "precisionTarget")
    FineTuneExperimentStatus.model_validate(done)
    apart = _repeat_pods(success_result(0, 1000.0), success_result(1, 1100.0))
    obs = classify_trials(jobs, apart, trials=4, workload_missing=False, one_job_per_trial=True, now=NOW,
                          repeated=True, precision=0.05)  # fmt: skip
    assert obs.phase == Phase.RUNNING and obs.next_trial == 2
    assert (
        "stoppedBy"
        not in st.StatusBuilder({}, 1, NOW).observed(obs, trials=4, repeated=True, precision=0.05)["repeats"]
    )
    # Without a target every planned repeat runs, however close they are.
    obs = classify_trials(jobs, close, trials=4, workload_missing=False, one_job_per_trial=True, now=NOW,
                          repeated=True)  # fmt: skip
    assert obs.next_trial == 2


def test_a_repeat_out_of_memory_makes_the_experiment_invalid():
    pods = _repeat_pods(success_result(0), oom_result(1), failed_result(2))
    obs = classify_trials([], pods, trials=3, workload_missing=False, one_job_per_trial=False, now=NOW, repeated=True)
    assert obs.phase == Phase.INVALID and obs.message.startswith("repeat 1 of 3: ")
    failed = classify_trials([], _repeat_pods(success_result(0), failed_result(1)), trials=2,
                             workload_missing=False, one_job_per_trial=False, now=NOW, repeated=True)  # fmt: skip
    assert failed.phase == Phase.FAILED and failed.message.startswith("repeat 1 of 2")
    running = classify_trials([], _repeat_pods(success_result(0)), trials=2, workload_missing=False,
                              one_job_per_trial=False, now=NOW, repeated=True)  # fmt: skip
    assert running.phase != Phase.SUCCEEDED and len(running.trial_results) == 1
    status = st.StatusBuilder({}, 1, NOW).observed(running, trials=2, repeated=True)
    assert status["repeats"]["finished"] == 1 and "results" not in status


def test_summaries_tolerate_odd_input():
    assert summarize_pod({}).phase == "Pending"
    assert (
        summarize_pod(
            {"metadata": {"labels": {"ftbench.io/trial": "x"}}, "status": {"containerStatuses": [{}]}}
        ).trial_label
        is None
    )
    body = {
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "status": {
            "conditions": [
                {"type": "Running", "status": "False"},
                {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "m"},
            ]
        },
    }
    w = summarize_workload(body)
    assert w.failed and w.reason == "PyTorchJobFailed" and not w.succeeded


def test_condition_transition_time_only_moves_on_transitions():
    first = st.set_condition([], "Ready", "False", "A", "a", generation=1, now=NOW)
    later = NOW + timedelta(minutes=5)
    same = st.set_condition(first, "Ready", "False", "B", "b", generation=2, now=later)
    assert same[0]["lastTransitionTime"] == first[0]["lastTransitionTime"] and same[0]["reason"] == "B"
    assert same[0]["observedGeneration"] == 2
    flipped = st.set_condition(same, "Ready", "True", "C", "c", generation=2, now=later)
    assert flipped[0]["lastTransitionTime"] == st.timestamp(later)


def test_builders_produce_schema_valid_status_and_minimal_patches():
    builder = st.StatusBuilder({}, 1, NOW)
    spec = {"model": "m", "modelMaxLength": 1024, "numberGpus": 0, "batchSize": 1}
    started = builder.started(0, {"apiVersion": "batch/v1", "kind": "Job", "name": "x-a0"}, spec, 1)
    FineTuneExperimentStatus.model_validate(st.strip_empty(started))
    assert st.diff(st.strip_empty(started), started) == {}
    done = st.StatusBuilder(started, 1, NOW).observed(run([terminated(success_result())]), trials=1)
    patch = st.diff(started, done)
    assert patch["phase"] == "Succeeded" and patch["results"]["trainTokensPerSecond"] == 1234.5
    full = FineTuneExperimentStatus.model_validate({**st.strip_empty(started), **st.strip_empty(patch)})
    assert full.is_valid is True
    retry = st.StatusBuilder(full.model_dump(mode="json", by_alias=True, exclude_none=True), 1, NOW).retrying(1, 1)
    assert retry["results"] is None and retry["attempt"] == 1
    invalid = st.StatusBuilder({}, 1, NOW).invalid_spec("InvalidSpec", "spec.batchSize: bad [is_valid.1]")
    assert invalid["isValid"] is False and st.condition(invalid, "Valid")["status"] == "False"
    clean = st.condition(done, ConditionType.MEASUREMENT_CLEAN)
    assert clean is not None and (clean["status"], clean["reason"]) == ("True", "Clean")


def test_a_flagged_measurement_says_why_in_a_condition():
    result = success_result()
    metrics = result.metrics.model_copy(update={"noise_flags": [NoiseFlag.SHORT_WINDOW, NoiseFlag.HOST_CONTENTION]})
    done = st.StatusBuilder({}, 1, NOW).observed(
        run([terminated(result.model_copy(update={"metrics": metrics}))]), trials=1
    )
    flagged = st.condition(done, ConditionType.MEASUREMENT_CLEAN)
    assert flagged is not None and (flagged["status"], flagged["reason"]) == ("False", "NoiseFlagged")
    assert (
        flagged["message"].startswith("shortWindow: fewer than 20 measured steps")
        and "hostContention" in flagged["message"]
    )
    assert done["results"]["noiseFlags"] == ["shortWindow", "hostContention"]


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        (TrainerStatusReport(url="https://t/s", sent=4), ("True", "Reported", "4 trainerStatus updates sent")),
        (
            TrainerStatusReport(url="https://t/s", sent=1, failures=2, last_error="KubeError: connection refused"),
            ("False", "TrainerStatusUnreported", "2 of 3 trainerStatus updates to https://t/s failed"),
        ),
    ],
    ids=["sent", "unreachable"],
)
def test_trainer_status_updates_to_kubeflow_are_a_condition(report, expected):
    """Inside a TrainJob with Trainer's status endpoint, how rank 0's trainerStatus updates went is a
    condition (a warning when they failed: training went on); elsewhere there is no such condition."""
    result = success_result()
    env = result.environment.model_copy(update={"kubeflow_trainer_status": report})
    done = st.StatusBuilder({}, 1, NOW).observed(
        run([terminated(result.model_copy(update={"environment": env}))]), trials=1
    )
    cond = st.condition(done, ConditionType.TRAINER_STATUS_REPORTED)
    assert cond is not None and (cond["status"], cond["reason"]) == expected[:2] and expected[2] in cond["message"]
    assert done["environment"]["kubeflowTrainerStatus"]["sent"] == report.sent
    plain = st.StatusBuilder({}, 1, NOW).observed(run([terminated(success_result())]), trials=1)
    assert st.condition(plain, ConditionType.TRAINER_STATUS_REPORTED) is None


def test_a_network_check_succeeds_with_its_figures_and_no_results():
    """run.networkPreflight only: success without metrics is the check's own result, not NoResult;
    success without metrics and without the network stays a failure."""
    network = NetworkInEffect(backend="gloo", transport=NetworkTransport.TCP, ranks=2, warmup_iterations=2,
                              iterations=10, seconds=1.0, peak_bus_bandwidth_gbps=1.5)  # fmt: skip
    checked = TrainerResult(
        outcome=Outcome.SUCCEEDED, is_valid=True, reason=REASON_NETWORK_CHECKED,
        environment=RunEnvironment(engine="trl", world_size=2, network=network),
    )  # fmt: skip
    done = st.StatusBuilder({}, 1, NOW).observed(run([terminated(checked)]), trials=1)
    assert done["phase"] == "Succeeded" and done["isValid"] is True and done.get("results") is None
    assert done["environment"]["network"]["peakBusBandwidthGbps"] == 1.5
    assert st.condition(done, ConditionType.NETWORK_AS_EXPECTED) is not None
    assert st.condition(done, ConditionType.MEASUREMENT_CLEAN) is None  # nothing was measured to be clean or noisy
    empty = checked.model_copy(update={"environment": RunEnvironment(engine="trl")})
    assert st.StatusBuilder({}, 1, NOW).observed(run([terminated(empty)]), trials=1)["phase"] == "Failed"


def test_status_records_the_accepted_batch_and_whether_roce_is_configured():
    """status.batch spells out ado's batchSize in HF/TRL's terms; a multi-node enableRoce run on a
    profile without roce.network gets RoceConfigured=False (True with one), other runs no condition."""
    from ftbench.api.profile import ClusterProfile
    from ftbench.api.spec import FineTuneExperimentSpec
    from ftbench.api.validation import load_profile

    spec = FineTuneExperimentSpec.model_validate({"model": "llama3.1-70b", "modelMaxLength": 4096, "numberGpus": 16,
        "numberNodes": 2, "batchSize": 16, "gpuModel": "NVIDIA-A100-SXM4-80GB", "enableRoce": True})  # fmt: skip
    builder = st.StatusBuilder({}, 1, NOW)
    problem = builder.roce(spec, ClusterProfile())
    started = builder.started(0, {"apiVersion": "batch/v1", "kind": "Job", "name": "x-a0"}, spec, 1)
    assert started["batch"] == {"perDeviceBatchSize": 1, "devices": 16, "gradientAccumulationSteps": 4,
                                "globalBatchSize": 64}  # fmt: skip
    roce = st.condition(started, ConditionType.ROCE_CONFIGURED)
    assert roce is not None and (roce["status"], roce["reason"]) == ("False", "NoRoceNetwork")
    assert problem is not None and "describes no RoCE" in roce["message"]
    FineTuneExperimentStatus.model_validate(st.strip_empty(started))
    configured = st.StatusBuilder({}, 1, NOW)
    assert configured.roce(spec, load_profile("examples/profiles/roce-cluster.yaml")) is None
    assert st.condition({"conditions": configured.conditions}, ConditionType.ROCE_CONFIGURED)["status"] == "True"
    single = st.StatusBuilder({}, 1, NOW)
    assert single.roce(spec.model_copy(update={"number_nodes": 1, "number_gpus": 8}), ClusterProfile()) is None
    assert single.conditions == []


def test_status_messages_are_bounded():
    """Issue 12: a 60 KB list of problems must not become a 187 KB status."""
    huge = "spec.targetModules[0]: bad; " * 3000
    invalid = st.StatusBuilder({}, 1, NOW).invalid_spec("InvalidSpec", huge)
    assert len(json.dumps(invalid)) < 5 * MESSAGE_MAX
    assert invalid["message"].endswith("`ftbench validate`)") and len(invalid["message"]) == MESSAGE_MAX
    failed = st.StatusBuilder({}, 1, NOW).observed(Observation(Phase.FAILED, "PodFailed", huge), trials=1)
    assert len(json.dumps(failed)) < 5 * MESSAGE_MAX
    assert bounded("short") == "short"


def test_every_string_a_trainer_writes_is_cut_to_its_crd_max_length():
    """Issue 27.7: a termination message with huge strings is truncated when read, never patched whole."""
    from ftbench.api.crd import crd
    from ftbench.contracts.results import TrainerResult

    big = "x" * 100_000
    result = TrainerResult.model_validate(
        {
            "outcome": "Failed",
            "reason": big,
            "error": {"type": big, "message": big},
            "environment": {"engine": big, "engineVersion": big, "image": big, "gpuName": big, "device": big},
        }
    )
    status_schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    environment = status_schema["properties"]["environment"]["properties"]
    assert result.environment is not None and result.error is not None
    for field, value in (
        ("engine", result.environment.engine),
        ("image", result.environment.image),
        ("gpuName", result.environment.gpu_name),
        ("device", result.environment.device),
    ):
        assert len(value) == environment[field]["maxLength"], field
    assert len(result.reason) < 200 and len(result.error.message) <= MESSAGE_MAX
    trial = status_schema["properties"]["stability"]["properties"]["trials"]["items"]["properties"]
    assert trial["message"]["maxLength"] == MESSAGE_MAX and trial["reason"]["maxLength"] < 200
    for field in ("message", "invalidReason"):
        assert status_schema["properties"][field]["maxLength"] == MESSAGE_MAX


def test_metrics_track_phases_and_headline_results():
    metrics = OperatorMetrics(CollectorRegistry())
    body = {
        "metadata": {"namespace": "ns", "name": "a"},
        "spec": {"model": "m", "experiment": "e", "numberGpus": 2},
        "status": {"phase": "Succeeded", "results": {"trainTokensPerSecond": 10.0}},
    }
    metrics.observe(body)
    text = generate_latest(metrics.registry).decode()
    assert (
        'ftbench_result_train_tokens_per_second{experiment="e",gpus="2",model="m",name="a",namespace="ns"} 10.0' in text
    )
    assert 'ftbench_experiments{phase="Succeeded"} 1.0' in text
    metrics.forget("ns", "a")
    text = generate_latest(metrics.registry).decode()
    assert (
        "ftbench_result_train_tokens_per_second{" not in text and 'ftbench_experiments{phase="Succeeded"} 0.0' in text
    )
    with pytest.raises(ValueError), metrics.timed("create"):
        raise ValueError
    assert (
        'ftbench_reconcile_errors_total{handler="create",kind="ValueError"} 1.0'
        in generate_latest(metrics.registry).decode()
    )


def test_settings_and_command_line(tmp_path):
    opts = OperatorSettings.from_env({"FTBENCH_OPERATOR_METRICS_PORT": "0", "POD_NAMESPACE": "ops", "OTHER": "x"})
    assert opts.metrics_port == 0 and opts.profile_namespace == "ops"
    # Issue 12: outside a pod (`kopf run`, `ftbench dev up`) the profile still comes from one namespace.
    assert OperatorSettings.from_env({}).profile_namespace == "ftbench-system"
    with pytest.raises(ValueError):
        OperatorSettings.from_env({"FTBENCH_OPERATOR_METRICS_PORT": "x"})
    assert argv([]) == [
        "run",
        "--standalone",
        "-m",
        "ftbench_operator.app",
        "--all-namespaces",
        "--liveness=http://0.0.0.0:8080/healthz",
    ]
    assert "--all-namespaces" not in argv(["--namespace=bench"])


def test_profile_source_keeps_the_last_good_profile(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text("gpuResource: example.com/gpu\n")
    source = ProfileSource(path)
    source.set_server_features(20, training_operator=False)
    profile = source.current()
    assert profile.gpu_resource == "example.com/gpu" and profile.features.indexed_jobs is False
    assert (
        source.update_from_config_map({"metadata": {"name": "p"}, "data": {"profile.yaml": "cpuPerGpu: [oops"}})
        is False
    )
    assert source.error and source.current().gpu_resource == "example.com/gpu"
    assert source.update_from_config_map(
        {"metadata": {"name": "p"}, "data": {"profile.yaml": "features: {indexedJobs: true}"}}
    )
    assert source.current().features.indexed_jobs is True  # explicit features win over the server's


def test_a_trainer_refusing_another_fms_release_fails_once_naming_the_image_to_build():
    """The trainer's own EngineMismatch result (exit 1, no retry: backoffLimit 0) becomes Failed with its reason."""
    from ftbench.contracts.plan import LaunchPlan
    from ftbench_trainer.engines.fms import EngineMismatchError, check_release
    from ftbench_trainer.worker import failure_result

    plan = LaunchPlan.model_construct(engine_version="2.1.2", allow_engine_mismatch=False)
    with pytest.raises(EngineMismatchError) as refused:
        check_release(plan)  # this environment has no fms-hf-tuning at all
    obs = run([terminated(failure_result(refused.value), 1)])
    assert (obs.phase, obs.reason) == (Phase.FAILED, "EngineMismatch")
    assert "the image carries no fms-hf-tuning, the experiment asks for 2.1.2" in obs.message
    assert "fms-hf-tuning-2.1.2" in obs.message


def test_metrics_export_the_network_preflight():
    metrics = OperatorMetrics(CollectorRegistry())
    roce = {"backend": "nccl", "transport": "ib", "linkLayer": "RoCE", "peakBusBandwidthGbps": 45.5}
    body = {
        "metadata": {"namespace": "ns", "name": "a"},
        "spec": {"model": "m", "experiment": "e", "numberGpus": 16},
        "status": {"phase": "Running", "environment": {"engine": "trl", "network": roce}},
    }
    series = (
        'ftbench_network_peak_bus_bandwidth_gbps{backend="nccl",experiment="e",gpus="16",link_layer="RoCE",'
        'model="m",name="a",namespace="ns",transport="ib"}'
    )
    metrics.observe(body)  # while it trains: the preflight ran before the model was loaded
    assert f"{series} 45.5" in generate_latest(metrics.registry).decode()
    # the next attempt fell back to sockets (and was refused for it): one series, with the new transport
    socket = {"backend": "nccl", "transport": "socket", "peakBusBandwidthGbps": 9.0}
    metrics.observe(body | {"status": {"phase": "Invalid", "environment": {"engine": "trl", "network": socket}}})
    text = generate_latest(metrics.registry).decode()
    assert series not in text and 'link_layer="",model="m",name="a",namespace="ns",transport="socket"} 9.0' in text
    # a retry that has not run its preflight yet: no series; nor after the experiment is gone
    metrics.observe(body | {"status": {"phase": "Pending"}})
    assert "ftbench_network_peak_bus_bandwidth_gbps{" not in generate_latest(metrics.registry).decode()
    metrics.observe(body)
    metrics.forget("ns", "a")
    assert "ftbench_network_peak_bus_bandwidth_gbps{" not in generate_latest(metrics.registry).decode()


def _predicted(peak_bytes: int, device: str = "cuda") -> dict:
    from ftbench.api.prediction_report import PredictionReport
    from ftbench.contracts.prediction import MemoryPrediction, MemorySplit

    split = MemorySplit(parameters_bytes=peak_bytes, gradients_bytes=0, optimizer_bytes=0, activations_bytes=0)
    prediction = MemoryPrediction(peak_bytes=peak_bytes, split=split, phase="backward", device=device, world_size=1,
                                  sharding="none", traced_parameters=1, trainable_parameters=1, seconds=1.0)  # fmt: skip
    return PredictionReport(prediction=prediction).model_dump(mode="json", by_alias=True, exclude_none=True)


def test_a_finished_run_records_its_measured_peak_beside_the_prediction():
    measured = success_result()
    metrics = measured.metrics.model_copy(update={"gpu_max_memory_allocated_bytes": 10_000_000_000})
    measured = measured.model_copy(update={"metrics": metrics})
    current = {"prediction": _predicted(10_500_000_000)}
    done = st.StatusBuilder(current, 1, NOW).observed(run([terminated(measured)]), trials=1)
    prediction = done["prediction"]
    assert prediction["measuredPeakBytes"] == 10_000_000_000 and prediction["errorPercent"] == 5.0
    assert prediction["measuredOom"] is False
    FineTuneExperimentStatus.model_validate(st.strip_empty({**current, **done}))
    oom = st.StatusBuilder(current, 1, NOW).observed(run([terminated(oom_result(), exit_code=EXIT_GPU_OOM)]), trials=1)
    assert oom["prediction"]["measuredOom"] is True and "measuredPeakBytes" not in oom["prediction"]
    # CPU ranks: the trainer's tracker counted the same quantity (cpuTensorPeakBytes).
    on_cpu = success_result()
    on_cpu = on_cpu.model_copy(update={"metrics": on_cpu.metrics.model_copy(update={"cpu_tensor_peak_bytes": 400})})
    cpu = st.StatusBuilder({"prediction": _predicted(500, "cpu")}, 1, NOW).observed(run([terminated(on_cpu)]), trials=1)
    assert cpu["prediction"]["measuredPeakBytes"] == 400 and cpu["prediction"]["errorPercent"] == 25.0


def test_every_experiment_condition_type_has_its_place_in_the_order() -> None:
    """Conditions are listed in CONDITION_ORDER; a new type in the contract must get a place there."""
    assert set(st.CONDITION_ORDER) == set(ConditionType) - {ConditionType.COMPLETE}  # Complete: sweeps only


@pytest.mark.parametrize(
    ("runtime", "kind"), [("IndexedJob", "Job"), ("PyTorchJob", "PyTorchJob"), ("TrainJob", "TrainJob"), ("Job", "Job")]
)
def test_status_job_is_the_workload_not_its_service(runtime: str, kind: str) -> None:
    """An Indexed Job renders its headless Service first, under the same name: status.job, which the operator
    follows, must be the Job (the rig's placement test found it named the Service)."""
    from ftbench.api.profile import ClusterProfile, Features
    from ftbench.api.spec import FineTuneExperimentSpec
    from ftbench.catalog import load_catalog
    from ftbench.render.manifests import render_experiment
    from ftbench_operator.children import workload_ref

    nodes = 1 if runtime == "Job" else 2
    spec = FineTuneExperimentSpec.model_validate(
        {"model": "llama-7b", "numberGpus": 8 * nodes, "numberNodes": nodes, "gpuModel": "NVIDIA-A100-SXM4-80GB",
         "batchSize": 16, "modelMaxLength": 2048, "datasetId": "news-tokens-16384plus-entries-4096",
         "run": {"runtime": runtime}}
    )  # fmt: skip
    features = Features(indexed_jobs=True, training_operator=True, trainer_v2=True)
    rendered = render_experiment(spec, load_catalog(), ClusterProfile(features=features), name="e", namespace="ns")
    ref = workload_ref(rendered)
    assert ref["kind"] == kind and ref["name"] == rendered.names.workloads[0], ref
