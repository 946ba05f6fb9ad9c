"""ftbench's own data files (catalogs, release tables), parsed by libyaml where PyYAML has it.

The pure-Python parser took most of a warm `ftbench predict`'s second on these files; libyaml's safe
loader gives the same objects in a tenth of the time. Users' documents go through api.strict_yaml.
"""

from __future__ import annotations

from typing import Any

import yaml

LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> Any:
    return yaml.load(text, Loader=LOADER)  # a safe loader: C or Python
