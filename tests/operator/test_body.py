"""The typed view the handlers read an experiment through (pure)."""

import dataclasses

import pytest

from ftbench.api.status import Phase
from ftbench_operator.body import ExperimentView

BODY = {
    "metadata": {"name": "x", "namespace": "ns", "uid": "u1", "generation": 3, "annotations": {"a": "b"}},
    "spec": {"model": "m"},
    "status": {
        "phase": "Invalid",
        "attempt": 2,
        "invalidReason": "GpuOutOfMemory: ...",
        "job": {"apiVersion": "batch/v1", "kind": "Job", "name": "x-a2"},
        "acceptedSpec": {"model": "accepted"},
        "acceptedGeneration": 1,
    },
}


def test_parses_what_the_handlers_read() -> None:
    view = ExperimentView.parse(BODY)
    assert (view.name, view.namespace, view.uid, view.generation) == ("x", "ns", "u1", 3)
    assert view.phase == Phase.INVALID and view.finished and view.attempt == 2 and not view.deleting
    assert view.job is not None and (view.job.api_version, view.job.kind, view.job.name) == ("batch/v1", "Job", "x-a2")
    assert view.accepted_spec() == ({"model": "accepted"}, 1)
    assert view.annotations["a"] == "b" and view.body is BODY
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.attempt = 3  # type: ignore[misc]


def test_a_new_experiment_runs_its_current_spec() -> None:
    view = ExperimentView.parse({"metadata": {"name": "x", "generation": 1}, "spec": {"model": "m"}})
    assert view.phase is None and not view.finished and view.attempt == 0 and view.job is None
    assert view.accepted_spec() == ({"model": "m"}, 1)
    assert ExperimentView.parse({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}).deleting


def _running(accepted: dict) -> ExperimentView:
    status = {"phase": "Running", "attempt": 0, "acceptedSpec": accepted, "acceptedGeneration": 1}
    return ExperimentView.parse({"metadata": {"name": "x", "namespace": "ns", "generation": 1}, "status": status})


def test_the_accepted_spec_is_read_once_into_what_a_sync_needs() -> None:
    """Issue 43 item 3: one parse per sync pass gives the trial count, the repeats' rule and the
    network expectation; nothing re-reads the dict."""
    from ftbench.api.profile import ClusterProfile
    from ftbench_operator.handlers.handle_follow import FollowedSpec

    spec = {"model": "tiny-llama", "modelMaxLength": 64, "numberGpus": 0, "batchSize": 2}
    stability = FollowedSpec.of(_running({**spec, "experiment": "finetune_full_stability-v1.0.0"}))
    assert (stability.trials, stability.repeated) == (5, False)
    repeats = FollowedSpec.of(_running({**spec, "repeats": 3}))
    assert (repeats.trials, repeats.repeated) == (3, True)
    assert repeats.spec.batch_size == 2 and not repeats.network(ClusterProfile()).roce


def test_an_accepted_spec_that_no_longer_parses_is_said_not_defaulted() -> None:
    """A status.acceptedSpec this operator cannot read (an upgrade that tightened a field, a status
    edited by hand) is a Failed run whose message names the field and the way out, never "one trial"."""
    from ftbench.api.status import Phase as P
    from ftbench_operator.classify import Observation
    from ftbench_operator.handlers.handle_follow import FollowedSpec, UnreadableSpec
    from ftbench_operator.reasons import UNREADABLE_SPEC
    from ftbench_operator.status import StatusBuilder, utcnow

    view = _running({"model": "tiny-llama", "modelMaxLength": 64, "numberGpus": 0, "batchSize": "four"})
    with pytest.raises(UnreadableSpec) as caught:
        FollowedSpec.of(view)
    message = caught.value.message()
    assert "batchSize" in message and "Delete the experiment and create it again" in message
    desired = StatusBuilder(view.status, 1, utcnow()).observed(
        Observation(P.FAILED, UNREADABLE_SPEC, message), trials=1
    )
    succeeded = {c["type"]: c for c in desired["conditions"]}["Succeeded"]
    assert (desired["phase"], succeeded["status"], succeeded["reason"]) == (P.FAILED, "False", UNREADABLE_SPEC)
