"""Reading experiment files: multi-document YAML, with the file and index in every error."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ftbench.api import strict_yaml
from ftbench.cli.main import UsageError


@dataclass(frozen=True)
class Document:
    source: str  # "file.yaml#2" (1-based document index) for messages
    body: Any


def read_documents(paths: list[str]) -> Iterator[Document]:
    """Yield every non-empty YAML document; '-' reads standard input. Parse errors raise ValueError."""
    for path in paths:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        try:
            bodies = strict_yaml.safe_load_all(text)
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML: {yaml_problem(err)}") from err
        non_empty = [b for b in bodies if b is not None]
        for index, body in enumerate(non_empty, start=1):
            yield Document(f"{path}#{index}" if len(non_empty) > 1 else path, body)


def yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error in one line: what and where (PyYAML's own text spans several with a source excerpt)."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        what = " ".join(p for p in (err.context, err.problem) if p)
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}"
    return " ".join(str(err).split())


def read_one_document(path: str, kind: str) -> Any:
    """The body of the one YAML document in `path` ('-': standard input), for the commands that run one
    `kind` (run, sweep); unreadable files, bad YAML and any other count are usage errors."""
    try:
        documents = list(read_documents([path]))
    except (OSError, ValueError) as err:
        raise UsageError(str(err)) from err
    if len(documents) != 1:
        raise UsageError(f"{path}: expected one {kind}, found {len(documents)} documents")
    return documents[0].body
