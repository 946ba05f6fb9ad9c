"""Upper bounds on what a spec may ask a cluster for, and the cluster profile's allow-lists.

A quantity the CRD's pattern accepts ("900Ei") is still no request any node can satisfy: planned,
it leaves a pod Pending until the pending deadline, and on a cluster without quotas it may block a
scheduler queue. The bounds refuse such a value at validation, naming the limit. Quantity parsing
has no CEL on the API servers ftbench supports (it arrived in 1.29), so these rules are Python only.

The profile rules need the cluster profile, so they are not in `all_rules` (which `ftbench validate`
runs without one); the operator and `ftbench validate --profile` add them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ftbench.api.profile import ClusterProfile
from ftbench.api.rules.rule import Rule, RuleFamily
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog

_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")

# The largest single machines sold today hold a few TiB; a request above this is a typo.
MAX_POD_MEMORY = "8Ti"
# Below this the trainer cannot even import torch and load a tokenizer.
MIN_POD_MEMORY = "1Gi"


def quantity_bytes(quantity: str) -> float:
    """A Kubernetes quantity in the forms spec.run.memory accepts, in bytes."""
    match = _QUANTITY.match(quantity)
    if match is None:
        raise ValueError(f"{quantity!r} is not a quantity")
    return float(match.group(1)) * _SUFFIX[match.group(2) or ""]


def bound_rules() -> Iterator[Rule]:
    family = RuleFamily()

    @family.rule("bounds.memory", "run.memory", f"run.memory is between {MIN_POD_MEMORY} and {MAX_POD_MEMORY}")
    def memory_bounded(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.run.memory is None:
            return None
        size = quantity_bytes(s.run.memory)
        if quantity_bytes(MIN_POD_MEMORY) <= size <= quantity_bytes(MAX_POD_MEMORY):
            return None
        side = (
            "more than the largest machines hold"
            if size > quantity_bytes(MIN_POD_MEMORY)
            else "too little to load torch"
        )
        return (
            f"run.memory {s.run.memory} is {side}; use a value from {MIN_POD_MEMORY} to {MAX_POD_MEMORY} "
            "(e.g. 64Gi), or remove it for the cluster profile's defaultMemory"
        )

    yield from family.rules


SYSTEM_PRIORITY_PREFIX = "system-"


def priority_class_allowed(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str | None:
    """spec.run.priorityClassName must be on the profile's allow-list (unset: any but system-*).

    system-node-critical and system-cluster-critical let a pod preempt the cluster's own
    components (DNS, CNI, the kubelet's static pods): no benchmark may ask for them.
    """
    name = spec.run.priority_class_name
    if name is None:
        return None
    allowed = profile.allowed_priority_classes
    if allowed is None:
        if not name.startswith(SYSTEM_PRIORITY_PREFIX):
            return None
        return (
            f"run.priorityClassName {name} is a system class, which preempts the cluster's own components; "
            "use a workload priority class, or remove it (an administrator may list it in the cluster "
            "profile's allowedPriorityClasses)"
        )
    if name in allowed:
        return None
    listed = ", ".join(allowed) or "none"
    return (
        f"run.priorityClassName {name} is not one this cluster allows (cluster profile allowedPriorityClasses: "
        f"{listed}); use one of those, or remove it"
    )
