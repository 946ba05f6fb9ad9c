"""What the API server refuses (or silently drops) that pydantic alone would accept.

The models accept snake_case names too (`populate_by_name`, so Python code can build them), but
an object on the API server has only the CRD's camelCase fields: a current server refuses an
unknown field (strict field validation) and 1.20 prunes it, so `batch_size: 8` would run with the
default batch. And metadata.name must be a DNS-1123 subdomain. `ftbench validate` checks both so
it agrees with the server (tests/k8s/test_validate_agrees.py feeds both the same documents).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from ftbench.api import bounds

DNS_SUBDOMAIN = re.compile(bounds.DNS_SUBDOMAIN)
NAME_MAX = 253
_DNS_LABEL, _QUALIFIED, _LABEL_VALUE = (
    re.compile(p) for p in (bounds.DNS_LABEL, bounds.QUALIFIED_NAME, bounds.LABEL_VALUE)
)
ANNOTATIONS_MAX_BYTES = 256 * 1024  # the API server's limit on all of an object's annotations together


def unknown_keys(raw: Any, model: type[BaseModel], prefix: str, what: str) -> Iterator[tuple[str, str, str]]:
    """(path, key, message) for every key of `raw` that is not a wire (camelCase) field of `model`,
    nested models included; a snake_case spelling of a field names the field to use."""
    if not isinstance(raw, Mapping):
        return
    fields = {info.alias or name: info for name, info in model.model_fields.items()}
    for key, value in raw.items():
        info = fields.get(key)
        if info is None:
            camel = to_camel(str(key))
            hint = (
                f"the API uses camelCase: write {camel}" if camel in fields and camel != key
                else "check the spelling (`kubectl explain` lists the fields)"
            )  # fmt: skip
            yield f"{prefix}.{key}", str(key), f"is not a {what} field; {hint}"
            continue
        nested = info.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            yield from unknown_keys(value, nested, f"{prefix}.{key}", what)


def name_problem(name: Any, what: str) -> str | None:
    """Why `name` cannot be a metadata.name (DNS-1123 subdomain, as the API server checks), or None."""
    if not name:
        return f"every {what} needs a name"
    if not isinstance(name, str) or len(name) > NAME_MAX or not DNS_SUBDOMAIN.match(name):
        return (
            f"must be a DNS-1123 subdomain as the API server requires: at most {NAME_MAX} lower-case letters, "
            "digits, '-' and '.', starting and ending with a letter or digit (e.g. lora-llama-bs8)"
        )
    return None


def metadata_problems(metadata: Any) -> Iterator[tuple[str, Any, str]]:
    """(path, value, message) for what the API server refuses in metadata besides the name: a
    namespace that is no DNS label, label keys and values, annotation keys and their total size."""
    if not isinstance(metadata, Mapping):
        return
    namespace = metadata.get("namespace")
    if namespace is not None and (
        not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL.match(namespace)
    ):
        yield "metadata.namespace", namespace, f"must be {bounds.PATTERN_WORDS[bounds.DNS_LABEL]}, at most 63"
    for field, values in (("labels", True), ("annotations", False)):
        entries = metadata.get(field)
        if entries is None:
            continue
        if not isinstance(entries, Mapping):
            yield f"metadata.{field}", entries, "must be a mapping of keys to strings"
            continue
        for key, value in entries.items():
            if not isinstance(key, str) or len(key) > 317 or not _QUALIFIED.match(key):
                yield f"metadata.{field}", key, f"key must be {bounds.PATTERN_WORDS[bounds.QUALIFIED_NAME]}"
            elif not isinstance(value, str):
                yield f"metadata.{field}.{key}", value, "must be a string (quote it in YAML)"
            elif values and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                yield f"metadata.{field}.{key}", value, f"must be {bounds.PATTERN_WORDS[bounds.LABEL_VALUE]}"
        size = sum(len(str(k)) + len(str(v)) for k, v in entries.items())
        if not values and size > ANNOTATIONS_MAX_BYTES:
            yield "metadata.annotations", f"{size} bytes", f"may hold at most {ANNOTATIONS_MAX_BYTES} bytes in all"
