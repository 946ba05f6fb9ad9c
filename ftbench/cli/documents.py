"""Reading experiment files: multi-document YAML, with the file and index in every error."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Document:
    source: str  # "file.yaml#2" (1-based document index) for messages
    body: Any


def read_documents(paths: list[str]) -> Iterator[Document]:
    """Yield every non-empty YAML document; '-' reads standard input. Parse errors raise ValueError."""
    for path in paths:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        try:
            bodies = list(yaml.safe_load_all(text))
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML: {err}") from err
        non_empty = [b for b in bodies if b is not None]
        for index, body in enumerate(non_empty, start=1):
            yield Document(f"{path}#{index}" if len(non_empty) > 1 else path, body)
