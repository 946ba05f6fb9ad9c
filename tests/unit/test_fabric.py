"""Issue 44.3: the network the profile describes decides the RoCE parts of the pods, NCCL's IB switch,
the warning and the refusal. An enableRoce run on a cluster without RoCE asks for no RDMA device (its
pods would never schedule) and runs on the fabric there is, with a warning that says which, unless
run.requireRoce refuses it; NCCL's IB is disabled only where the nodes have none."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api.fabric import roce_warning
from ftbench.api.profile import ClusterProfile, Roce, catalog_for
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import validate_spec_dict
from ftbench.contracts import env as E
from ftbench.render.manifests import render_experiment

SPEC: dict[str, Any] = {"model": "llama3.1-8b", "modelMaxLength": 1024, "gpuModel": "NVIDIA-A100-SXM4-80GB",
                        "numberGpus": 16, "numberNodes": 2, "batchSize": 16, "run": {"runtime": "IndexedJob"}}  # fmt: skip
ROCE = ClusterProfile(fabric="RoCE", roce=Roce(network="multi-nic-network"))


def _pods(spec: dict[str, Any], profile: ClusterProfile) -> list[dict[str, Any]]:
    parsed = FineTuneExperimentSpec.model_validate(spec)
    rendered = render_experiment(parsed, catalog_for(profile), profile, name="x", namespace="ns")
    return [o["spec"]["template"] for o in rendered.objects if o["kind"] == "Job"]


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(
    ("profile", "roce_parts", "ib_disable", "warned"),
    [
        (ROCE, True, "0", None),
        (ClusterProfile(), False, None, "NCCL uses what the nodes have"),
        (ClusterProfile(fabric="InfiniBand"), False, None, "NCCL runs over InfiniBand"),
        (ClusterProfile(fabric="none"), False, "1", "TCP sockets (NCCL_IB_DISABLE=1)"),
        (ClusterProfile(fabric="RoCE"), True, "0", "sets no roce.network"),
    ],
)
def test_an_enable_roce_run_gets_what_the_fabric_has(
    profile: ClusterProfile, roce_parts: bool, ib_disable: str | None, warned: str | None
) -> None:
    spec = {**SPEC, "enableRoce": True}
    (pod,) = _pods(spec, profile)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert ("nvidia.com/roce_gdr" in limits) is roce_parts
    assert _env(pod).get(E.NCCL_IB_DISABLE) == ib_disable
    warning = roce_warning(FineTuneExperimentSpec.model_validate(spec), profile)
    assert (warning is None) if warned is None else (warning is not None and warned in warning)


@pytest.mark.parametrize(
    ("profile", "ib_disable"),
    [(ClusterProfile(), None), (ClusterProfile(fabric="InfiniBand"), None), (ClusterProfile(fabric="none"), "1"),
     (ROCE, "1")],
)  # fmt: skip
def test_nccl_ib_is_disabled_only_where_the_nodes_have_no_ib(profile: ClusterProfile, ib_disable: str | None) -> None:
    """A run without enableRoce: an InfiniBand cluster keeps IB; a RoCE cluster's run without RoCE gets
    none of RoCE's devices, so TCP is chosen deliberately there, not probed for."""
    (pod,) = _pods(SPEC, profile)
    assert _env(pod).get(E.NCCL_IB_DISABLE) == ib_disable


def test_require_roce_is_refused_where_there_is_no_roce_and_runs_where_there_is() -> None:
    spec = {**SPEC, "enableRoce": True, "run": {"runtime": "IndexedJob", "requireRoce": True}}
    for profile in (ClusterProfile(), ClusterProfile(fabric="InfiniBand"), ClusterProfile(fabric="none")):
        (issue,) = validate_spec_dict(spec, catalog_for(profile), profile=profile).issues
        assert issue.rule == "profile.no-roce" and "remove run.requireRoce" in issue.message
    assert validate_spec_dict(spec, catalog_for(ROCE), profile=ROCE).ok
