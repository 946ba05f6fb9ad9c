"""The trainer's identity: who the training pods are, and the one thing they may do.

Rank 0 reports progress by patching `finetuneexperiments/status`. A Role shared by a namespace
would let any training pod there patch *any* experiment's status (forge another run's result), so
each experiment gets its own Role that names only that experiment (`resourceNames`), bound to the
pods' account: a ServiceAccount `<experiment>-trainer` of its own unless the profile names one.
With `reportProgress: false` nothing is created. The objects are per experiment (not per attempt);
owner references make the garbage collector delete them with the experiment.

Design notes: docs/design-notes.md, "ftbench/render/access.py".
"""

from __future__ import annotations

from ftbench.api.profile import ClusterProfile
from ftbench.api.resource import GROUP, PLURAL
from ftbench.contracts.kube import Obj
from ftbench.render.names import trainer_account_name

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
ACCESS_KINDS = ("ServiceAccount", "Role", "RoleBinding")
# What the progress reporter does (ftbench_trainer.progress_reporter): a merge patch of status.progress.
PROGRESS_RULE: Obj = {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch"]}


def pod_account(profile: ClusterProfile, experiment: str, *, roce: bool) -> str | None:
    """The pods' ServiceAccount: the profile's (RoCE's first on RoCE runs), else the experiment's
    own when progress is reported, else none (the namespace's `default`, with no token mounted)."""
    named = (profile.roce.service_account if roce else None) or profile.service_account
    if named:
        return named
    return trainer_account_name(experiment) if profile.report_progress else None


def trainer_access(
    profile: ClusterProfile, experiment: str, namespace: str, labels: dict[str, str], *, roce: bool
) -> list[Obj]:
    """ServiceAccount (when the experiment's own), Role and RoleBinding, in creation order."""
    account = pod_account(profile, experiment, roce=roce)
    if not profile.report_progress or account is None:
        return []
    name = trainer_account_name(experiment)

    def meta() -> Obj:
        out: Obj = {"name": name, "labels": dict(labels)}
        if namespace:
            out["namespace"] = namespace
        return out

    objects: list[Obj] = []
    if account == name:
        objects.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta()})
    rule = {**PROGRESS_RULE, "resourceNames": [experiment]}
    objects.append({"apiVersion": RBAC_API_VERSION, "kind": "Role", "metadata": meta(), "rules": [rule]})
    subject: Obj = {"kind": "ServiceAccount", "name": account}
    if namespace:
        subject["namespace"] = namespace
    objects.append(
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "RoleBinding",
            "metadata": meta(),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        }
    )
    return objects
