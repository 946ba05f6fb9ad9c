"""No traceback from any CLI verb: malformed files, options and paths get one line and exit 2.

Every verb that reads a file is fed the same bad inputs (a path that does not exist, a directory, bad
YAML, a key written twice, a document that is a list, metadata that is a list, a scalar, bytes that are
not UTF-8), every output option a path it cannot write, and numeric options values out of range; on
top, hypothesis writes arbitrary text into the file. Each must end in exit code 2 with one line on
stderr that names the command (a spec that parses but breaks rules lists its problems, one a line).
An exception escaping `main` fails the test with its traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftbench.cli import main

# Verbs that read one or more experiment/sweep files, with the arguments that would otherwise succeed.
FILE_VERBS: dict[str, tuple[str, ...]] = {
    "validate": ("validate", "{file}"),
    "render": ("render", "{file}"),
    "render-command": ("render", "--command", "{file}"),
    "predict": ("predict", "{file}"),
    "run": ("run", "{file}"),
    "sweep": ("sweep", "{file}"),
    "sweep-dry-run": ("sweep", "--dry-run", "{file}"),
}
BAD_FILES: dict[str, bytes | None] = {
    "missing": None,
    "bad-yaml": b"spec: [1, 2\n",
    "duplicate-key": b"apiVersion: ftbench.io/v1alpha1\nkind: FineTuneExperiment\nmetadata: {name: a}\n"
    b"spec:\n  batchSize: 2\n  batchSize: 4\n",
    "list-document": b"- a\n- b\n",
    "list-metadata": b"apiVersion: ftbench.io/v1alpha1\nkind: FineTuneExperiment\nmetadata: [a, b]\nspec: {}\n",
    "scalar": b"42\n",
    "not-utf8": b"\xff\xfe\xfa\x00spec",
    "empty": b"",
}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FTBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FTBENCH_CACHE", str(tmp_path / "cache"))


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        code = main(list(args))
    except SystemExit as stop:  # argparse's own errors
        code = int(stop.code or 0)
    return code, capsys.readouterr().err


# validate and render say "FILE: NAME: invalid" and list the problems of a document that is no valid
# experiment, and exit 1 (as they document); everything else that stops a command exits 2.
INVALID_IS_ONE = ("validate", "render")


def assert_one_line(code: int, err: str, args: tuple[str, ...]) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    if code == 1 and args[0] in INVALID_IS_ONE:
        return
    assert code == 2, (args, code, err)
    assert "Traceback" not in err, (args, err)
    assert lines and lines[0].startswith("ftbench"), (args, err)
    # A spec that parses but is invalid lists its problems, one per line (field, value, rule, fix), as
    # validate does; anything else that stops a command is one line.
    assert len(lines) == 1 or args[0] == "validate" or lines[0].endswith("is invalid:"), (args, err)


def write(tmp_path: Path, body: bytes | None, name: str = "in.yaml") -> str:
    path = tmp_path / name
    if body is not None:
        path.write_bytes(body)
    return str(path)


@pytest.mark.parametrize("verb", sorted(FILE_VERBS))
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_every_file_verb_refuses_a_bad_file_in_one_line(verb, case, tmp_path, capsys):
    args = tuple(a.format(file=write(tmp_path, BAD_FILES[case])) for a in FILE_VERBS[verb])
    assert_one_line(*run_cli(capsys, *args), args)


@pytest.mark.parametrize("verb", sorted(FILE_VERBS))
def test_a_directory_is_not_a_file(verb, tmp_path, capsys):
    args = tuple(a.format(file=str(tmp_path)) for a in FILE_VERBS[verb])
    assert_one_line(*run_cli(capsys, *args), args)


@pytest.mark.parametrize(
    "args",
    [
        ("render", "examples/lora.yaml", "--attempt", "-1"),
        ("render", "examples/lora.yaml", "--attempt", "x"),
        ("results", "--export", "json", "-o", "/missing/dir/x.json"),
        ("results", "--export", "csv", "-o", "{tmp}"),
        ("results", "--import", "ado", "{tmp}/missing.csv"),
        ("results", "--import", "csv", "examples/lora.yaml"),
        ("results", "compare", "nope", "nada"),
        ("report", "-o", "/proc/none/report"),
        ("crd", "-o", "/proc/none/crds"),
        ("docs", "-o", "/proc/none/docs"),
        ("validate", "examples/lora.yaml", "--profile", "{tmp}/missing-profile.yaml"),
        ("render", "examples/lora.yaml", "--profile", "{tmp}"),
        ("dataset", "generate", "no-such-dataset", "-o", "{tmp}/d"),
        ("catalog", "nothing"),
        ("engines", "build", "0.0.0"),
        ("nosuchverb",),
    ],
    ids=lambda a: "-".join(a).replace("/", "")[:60],
)
def test_bad_options_and_paths_are_one_line(args, tmp_path, capsys):
    args = tuple(a.format(tmp=tmp_path) for a in args)
    assert_one_line(*run_cli(capsys, *args), args)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_arbitrary_text_is_refused_or_read_never_a_traceback(text, tmp_path_factory, capsys):
    path = tmp_path_factory.mktemp("fuzz") / "in.yaml"
    path.write_text(text)
    for verb in ("validate", "render", "predict"):
        code, err = run_cli(capsys, verb, str(path))
        assert "Traceback" not in err and (code in (0, 2) or (code == 1 and verb in INVALID_IS_ONE)), (verb, code, err)
