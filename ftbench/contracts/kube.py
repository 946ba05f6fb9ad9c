"""How ftbench holds a Kubernetes object in Python, named once for every part that passes one on.

An object travels as JSON between the renderer, the API server, the operator, the test rig's
kubelet and the report, and each of them holds it decoded: a plain dict (`Obj`), addressed by
namespace and name (`ObjectKey`). The aliases say what a dict is without a copy per module.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]  # one Kubernetes object (or a part of one), as decoded JSON
ObjectKey = tuple[str, str]  # (namespace, name)
