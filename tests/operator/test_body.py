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
