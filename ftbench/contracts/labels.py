"""Label and annotation keys ftbench puts on Kubernetes objects, and the selectors built from them.

Labels cross process boundaries: the renderer (CLI or operator) writes them, the operator's
watches and list calls select by them, the Helm chart's admission policy and profile ConfigMap
spell them in YAML, and users select pods with them. Each key is defined here once; the chart's
spellings are checked against these names by tests/unit/test_contract_names.py.

The standard library only, so the dev cluster's kubelet (stdlib only) imports it too.
"""

from __future__ import annotations

import hashlib

#: A label value's and a DNS label's length limit; names are cut to fit with a hash (`fit`).
DNS_LABEL_MAX = 63
HASH_LEN = 8

#: The app name in the recommended `app.kubernetes.io/*` labels and the managed-by value.
APP_NAME = "ftbench"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: What the operator watches: every object and pod ftbench renders carries this label.
MANAGED_BY: dict[str, str] = {MANAGED_BY_LABEL: APP_NAME}
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={APP_NAME}"

#: The experiment (its name cut to a label value, `label_value`) an object belongs to.
EXPERIMENT_LABEL = "ftbench.io/experiment"
#: The run attempt (`status.attempt`, raised by `RETRY_ANNOTATION`).
ATTEMPT_LABEL = "ftbench.io/attempt"
#: The stability trial a pod or workload runs, where each trial has its own.
TRIAL_LABEL = "ftbench.io/trial"
#: The FineTuneSweep (its name cut to a label value) a child FineTuneExperiment belongs to.
SWEEP_LABEL = "ftbench.io/sweep"
#: The sweep point (its number) and the repeat (0-based) a child FineTuneExperiment runs.
SWEEP_POINT_LABEL = "ftbench.io/sweep-point"
SWEEP_REPEAT_LABEL = "ftbench.io/sweep-repeat"
#: `"true"` on the ConfigMap that holds the cluster profile (the chart creates it).
PROFILE_LABEL = "ftbench.io/profile"
#: `"true"` on the Node a local kubelet (`ftbench dev`) registers.
LOCAL_KUBELET_LABEL = "ftbench.io/local-kubelet"

#: The full experiment name, where the label value had to be cut.
EXPERIMENT_NAME_ANNOTATION = "ftbench.io/experiment-name"
#: The runtime an attempt was rendered for.
RUNTIME_ANNOTATION = "ftbench.io/runtime"
#: Set by a user on a FineTuneExperiment to run it again as the next attempt.
RETRY_ANNOTATION = "ftbench.io/retry"


def attempt_selector(name: str, attempt: int | None = None, *, other_than: int | None = None) -> str:
    """A label selector for experiment `name`'s children: all of them, one attempt's, or all but one
    attempt's (what a retry deletes). The operator's list calls and `ftbench render` users share it."""
    selector = f"{EXPERIMENT_LABEL}={label_value(name)}"
    if attempt is not None:
        selector += f",{ATTEMPT_LABEL}={attempt}"
    if other_than is not None:
        selector += f",{ATTEMPT_LABEL}!={other_than}"
    return selector


def digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:HASH_LEN]


def fit(name: str, limit: int) -> str:
    """`name` if it fits, else a prefix plus a hash of the whole name (stable, collision-resistant)."""
    if len(name) <= limit:
        return name
    return f"{name[: limit - HASH_LEN - 1].rstrip('-')}-{digest(name)}"


def label_value(value: str) -> str:
    """A label value (<= 63 chars, alphanumeric at both ends) that still identifies `value`:
    experiment and sweep names are cut this way wherever they become a label or a selector."""
    return fit(value, DNS_LABEL_MAX).strip("-._")
