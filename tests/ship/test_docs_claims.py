"""What README.md, docs/ and the examples' comments tell a user to type exists: the files they name,
the `ftbench` flags, the example objects `kubectl` is pointed at, and every `helm --set` key (the
chart rendered with it differs from the defaults). A new user follows these word for word.

Every example validating is tests/ship/test_examples.py's job.
"""

from __future__ import annotations

import argparse
import glob
import re
from pathlib import Path

import yaml

from ftbench.cli.main import build_parser
from tests.ship.chart import render

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted(EXAMPLES.rglob("*.yaml"))]

# A path under one of the repository's top-level folders, as a page writes it.
PATH = re.compile(
    r"(?<![\w./-])((?:ftbench|operator|trainer-image|tests|hack|docs|examples|helm|crds|bench)/[\w./*-]*[\w*])"
)
# `ftbench ARGS` where a command starts: line start, a code span, after && or |, a prompt, .venv/bin/.
FTBENCH = re.compile(r"(?:^|`|&&\s*|\|\s*|\$\s|\.venv/bin/)\s*ftbench ([^`\n#&|;)]+)", re.M)
# `kubectl get|describe|delete fte|fts NAME`: NAME is an object a page created from examples/.
KUBECTL_NAME = re.compile(r"kubectl (?:get|describe|delete) (fte|fts) ([a-z0-9][a-z0-9.-]*)")
SWEEP_NAME = re.compile(r"ftbench report --sweep ([a-z0-9][a-z0-9.-]*)")
HELM_SET = re.compile(r"--set ([\w.]+)=([^\s`]+)")


def texts() -> list[tuple[str, str]]:
    return [(str(p.relative_to(REPO)), p.read_text()) for p in PAGES]


def example_names(kind: str) -> set[str]:
    docs = [d for p in EXAMPLES.glob("*.yaml") for d in yaml.safe_load_all(p.read_text()) if d]
    return {d["metadata"]["name"] for d in docs if d.get("kind") == kind}


def test_named_files_exist() -> None:
    missing = []
    for page, text in texts():
        for match in PATH.finditer(text):
            path = match.group(1).split("::")[0]
            if "<" not in path and not any(glob.glob(str(base / path)) for base in (REPO, (REPO / page).parent)):
                missing.append(f"{page}: {path}")
    assert not missing


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def _passes_the_rest_on(parser: argparse.ArgumentParser) -> bool:
    """`ftbench dataset` hands its arguments to another parser: its flags are that one's."""
    return any(a.nargs == argparse.REMAINDER for a in parser._actions)


def _unknown_flags(root: argparse.ArgumentParser, words: list[str]) -> list[str]:
    parser, unknown = root, []
    for word in (w.strip("[]") for w in words):
        if word.startswith("-"):
            options = {o for a in parser._actions for o in a.option_strings}
            for flag in (f.split("=")[0] for f in re.split(r"[|\[\]]", word)):
                if flag.startswith("-") and flag not in options and not _passes_the_rest_on(parser):
                    unknown.append(flag)
        elif (name := word.split("|")[0]) in _subcommands(parser):
            parser = _subcommands(parser)[name]
    return unknown


def test_documented_ftbench_flags_exist() -> None:
    root = build_parser()
    commands = [(page, m.group(1).split()) for page, text in texts() for m in FTBENCH.finditer(text)]
    commands = [(page, words) for page, words in commands if words and words[0].split("|")[0] in _subcommands(root)]
    assert len(commands) > 30  # the pattern still finds the commands the pages show
    wrong = [f"{page}: ftbench {' '.join(words)}: {flag}" for page, words in commands
             for flag in _unknown_flags(root, words)]  # fmt: skip
    assert not wrong


def test_objects_kubectl_is_pointed_at_are_examples() -> None:
    names = {"fte": example_names("FineTuneExperiment"), "fts": example_names("FineTuneSweep")}
    named = [(page, kind, name) for page, text in texts() for kind, name in KUBECTL_NAME.findall(text)]
    named += [(page, "fts", name) for page, text in texts() for name in SWEEP_NAME.findall(text)]
    assert named
    assert not [f"{page}: {kind} {name}" for page, kind, name in named if name not in names[kind]]


def _values(key: str, value: str) -> dict:
    """`--set a.b.c=v` as Helm reads it, a placeholder like `<your registry>/x` made concrete."""
    value = re.sub(r"<[^>]*>", "registry.example.com", value)
    out: dict = {}
    node = out
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    # Helm's --set reads true/false as booleans and digits as integers (--set-string would not).
    node[last] = {"true": True, "false": False}.get(value, int(value) if value.isdigit() else value)
    return out


def test_documented_helm_sets_change_the_chart() -> None:
    sets = {(key, value) for _, text in texts() for key, value in HELM_SET.findall(text)}
    assert sets
    defaults = render()
    for key, value in sorted(sets):
        assert render(_values(key, value)) != defaults, f"--set {key}={value} changes nothing the chart renders"
