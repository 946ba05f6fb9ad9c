"""The chart's optional ValidatingAdmissionPolicy, evaluated offline with cel-python.

The test API server (1.20) has no ValidatingAdmissionPolicy, so its CEL is run here the way the
API server would: match conditions, then variables, then every validation must be true. The
objects are what the operator really creates (rendered and adopted as `children.create_all` does).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.ship.chart import by_kind, render
from tests.unit.render_cases import CASES

celpy = pytest.importorskip("celpy")

NAMESPACE = "ftbench"
OPERATOR = f"system:serviceaccount:{NAMESPACE}:ftb-ftbench"
EXPERIMENT = {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneExperiment", "name": "exp", "uid": "u-1"}


def policy() -> dict[str, Any]:
    (vap,) = by_kind(render({"admissionPolicy": {"enabled": True}}, namespace=NAMESPACE), "ValidatingAdmissionPolicy")
    return vap


def _run(expression: str, activation: dict[str, Any]) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    result = program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    assert not isinstance(result, celpy.CELEvalError), f"{expression}: {result}"  # an error is a denial too
    return result


def admitted(operation: str, resource: str, obj: dict | None, old: dict | None, user: str = OPERATOR) -> bool:
    """What the API server decides: not matched (allowed), or every validation true."""
    spec = policy()["spec"]
    request = {"operation": operation, "userInfo": {"username": user}, "resource": {"resource": resource}}
    base = {"request": request, "object": obj, "oldObject": old}
    if not all(_run(c["expression"], base) for c in spec["matchConditions"]):
        return True
    variables: dict[str, Any] = {}
    for var in spec["variables"]:
        variables[var["name"]] = _run(var["expression"], {**base, "variables": variables})
    return all(bool(_run(v["expression"], {**base, "variables": variables})) for v in spec["validations"])


def owned(obj: dict) -> dict:
    """As `kopf.adopt` sets it (controller and blockOwnerDeletion true)."""
    out = copy.deepcopy(obj)
    ref = {**EXPERIMENT, "controller": True, "blockOwnerDeletion": True}
    out["metadata"]["ownerReferences"] = [ref]
    return out


def rendered_objects() -> list[dict]:
    """A default-profile run's objects (trainer identity, plan ConfigMap, Job), adopted."""
    case = next(c for c in CASES if c.name == "lora-1gpu")
    return [owned(o) for o in case.render().objects]


PLURALS = {"ConfigMap": "configmaps", "Service": "services", "ServiceAccount": "serviceaccounts", "Job": "jobs"}
PLURALS |= {"Role": "roles", "RoleBinding": "rolebindings"}


def test_policy_is_off_by_default() -> None:
    assert not by_kind(render(), "ValidatingAdmissionPolicy")


def test_what_the_operator_creates_is_admitted() -> None:
    for obj in rendered_objects():
        assert admitted("CREATE", PLURALS[obj["kind"]], obj, None), obj["kind"]
        if obj["kind"] in ("ConfigMap", "Job"):
            assert admitted("DELETE", PLURALS[obj["kind"]], None, obj), obj["kind"]


def test_other_configmaps_cannot_be_written_by_the_operator() -> None:
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "aws-auth", "namespace": "kube-system"}}
    assert not admitted("DELETE", "configmaps", None, foreign)
    assert not admitted("CREATE", "configmaps", owned(foreign), None)
    labelled = copy.deepcopy(foreign)
    labelled["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "ftbench", "ftbench.io/experiment": "x"}
    assert not admitted("CREATE", "configmaps", labelled, None), "labelled but not owned by an experiment"
    assert admitted("DELETE", "configmaps", None, foreign, user="system:admin"), "other users are not matched"


def test_a_rolebinding_binds_only_its_own_role() -> None:
    (binding,) = [o for o in rendered_objects() if o["kind"] == "RoleBinding"]
    grab = copy.deepcopy(binding)
    grab["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"}
    assert not admitted("CREATE", "rolebindings", grab, None)
    assert admitted("CREATE", "rolebindings", binding, None)


def test_the_policy_binding_denies() -> None:
    objects = render({"admissionPolicy": {"enabled": True}}, namespace=NAMESPACE)
    (binding,) = by_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy()["metadata"]["name"], "validationActions": ["Deny"]}


SWEEP = {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneSweep", "name": "sw", "uid": "u-2"}


def sweep_child(owner: dict[str, Any]) -> dict[str, Any]:
    """A child experiment as the sweep controller creates it (`handle_sweep.child_body`)."""
    labels = {"app.kubernetes.io/managed-by": "ftbench", "ftbench.io/sweep": "sw", "ftbench.io/sweep-point": "0"}
    return {
        "apiVersion": "ftbench.io/v1alpha1",
        "kind": "FineTuneExperiment",
        "metadata": {"name": "sw-p0-r0", "labels": labels,
                     "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}]},
        "spec": {},
    }  # fmt: skip


def test_the_operator_creates_experiments_only_for_a_sweep() -> None:
    """Issue 15: create on finetuneexperiments is granted for sweeps; the policy narrows it to
    experiments labelled with their sweep and controlled by a FineTuneSweep."""
    assert admitted("CREATE", "finetuneexperiments", sweep_child(SWEEP), None)
    assert not admitted("CREATE", "finetuneexperiments", sweep_child(EXPERIMENT), None), "owned by an experiment"
    unlabelled = sweep_child(SWEEP)
    del unlabelled["metadata"]["labels"]["ftbench.io/sweep"]
    assert not admitted("CREATE", "finetuneexperiments", unlabelled, None)
    assert admitted("CREATE", "finetuneexperiments", unlabelled, None, user="system:admin"), "users are not matched"
