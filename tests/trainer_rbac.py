"""The trainer's one permission (`ftbench.render.access.PROGRESS_RULE`: get and patch experiments'
status) granted to a ServiceAccount, for tests that run the progress reporter without the operator
creating each experiment's own Role."""

from __future__ import annotations

from typing import Any

from ftbench.render.access import PROGRESS_RULE

ROLE = "ftbench-trainer"


def grant_progress(rbac: Any, namespace: str, account: str) -> None:
    """A Role `ftbench-trainer` with the progress rule for every experiment of `namespace`, bound to
    `account` (`rbac`: a kubernetes RbacAuthorizationV1Api)."""
    rbac.create_namespaced_role(namespace, {"metadata": {"name": ROLE}, "rules": [PROGRESS_RULE]})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )
