"""What names a resident predictor (ftbench.local.resident): everything that decides an answer besides the plan,
and nothing a shell changes from one command to the next."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftbench.contracts.env import FTBENCH_CACHE, FTBENCH_PREDICTOR, FTBENCH_TRACE_CACHE
from ftbench.local import resident

ENV = {FTBENCH_CACHE: "/tmp/ftb", "PATH": "/usr/bin", FTBENCH_TRACE_CACHE: "/tmp/ftb/traces"}


def test_what_decides_an_answer_names_another_predictor() -> None:
    base = resident.socket_path(sys.executable, ENV, "/work")
    assert base.parent == Path("/tmp/ftb/predictors") and base.suffix == ".sock"
    assert resident.socket_path(sys.executable, dict(ENV), "/work") == base
    others = [
        resident.socket_path(sys.executable, {**ENV, FTBENCH_TRACE_CACHE: "/elsewhere"}, "/work"),
        resident.socket_path(sys.executable, {**ENV, "HF_HOME": "/models"}, "/work"),
        resident.socket_path(sys.executable, ENV, "/other"),  # a plan may name a relative model folder
        resident.socket_path("/usr/bin/python3", ENV, "/work"),
    ]
    assert base not in others and len(set(others)) == len(others)


def test_what_a_shell_changes_between_commands_names_the_same_predictor() -> None:
    base = resident.socket_path(sys.executable, ENV, "/work")
    shell = {**ENV, "PWD": "/x", "OLDPWD": "/y", "SHLVL": "3", "_": "/usr/bin/ftbench", "PYTEST_CURRENT_TEST": "t"}
    assert resident.socket_path(sys.executable, shell, "/work") == base


def test_an_edited_source_file_is_another_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "ftb_probe_pkg"
    package.mkdir()
    module = package / "__init__.py"
    module.write_text("A = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = resident.sources_digest(["ftb_probe_pkg"])
    assert resident.sources_digest(["ftb_probe_pkg"]) == before
    module.write_text("A = 22\n")
    os.utime(module, ns=(1, 1))
    assert resident.sources_digest(["ftb_probe_pkg"]) != before


@pytest.mark.parametrize(("value", "idle"), [("", 600.0), ("off", None), ("OFF", None), ("30", 30.0), ("x", 600.0)])
def test_the_setting_is_idle_seconds_or_off(value: str, idle: float | None) -> None:
    assert resident.idle_seconds({FTBENCH_PREDICTOR: value}) == idle


def test_off_or_a_socket_path_too_long_asks_no_predictor() -> None:
    assert resident.ask(sys.executable, {**ENV, FTBENCH_PREDICTOR: "off"}, "plan", ["{}"], 5) is None
    deep = {**ENV, FTBENCH_CACHE: "/tmp/" + "d" * 120, FTBENCH_PREDICTOR: "30"}
    assert resident.ask(sys.executable, deep, "plan", ["{}"], 5) is None


def test_the_files_of_predictors_gone_for_a_day_are_pruned(tmp_path: Path) -> None:
    old, fresh, running = tmp_path / "old", tmp_path / "fresh", tmp_path / "running"
    for stem in (old, fresh, running):
        for suffix in (".log", ".lock"):
            stem.with_suffix(suffix).write_text("")
    running.with_suffix(".pid").write_text("1\n")
    for path in [*tmp_path.glob("old.*"), *tmp_path.glob("running.*")]:
        os.utime(path, (0, 0))
    resident._prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fresh.lock", "fresh.log", "running.lock", "running.log", "running.pid"]  # fmt: skip


def test_a_process_that_ended_is_not_running_and_one_that_runs_is() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process
    assert resident._running(os.getpid()) and resident._exists(os.getpid())
    assert not resident._running(child.pid) and not resident._exists(child.pid)
