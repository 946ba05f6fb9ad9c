"""Asking the resident predictor (ftbench_trainer.predict.resident) instead of starting a predictor process.

`ftbench predict` answers from one engine environment many times in a row; a fresh predictor process pays its
imports (about 4 s on one core) every time. The first call starts a resident predictor for the interpreter and
asks it; later calls ask the same one (a kept trace answers in milliseconds) until it has been idle for
`FTBENCH_PREDICTOR` seconds (600 by default; `off`: one process per call, as before).

The socket's name hashes everything that decides an answer besides the plan: the interpreter, its environment
(less what a shell changes from one command to the next), the working directory (a plan may name a relative
model folder) and ftbench's own sources (path, size and modification time of each file, so an edited checkout is
a new predictor). A predictor that cannot be started or asked is never an error: the caller runs the one-shot
process (`ask` returns None).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from ftbench.contracts.env import FTBENCH_PREDICTOR, cache_root

DEFAULT_IDLE_SECONDS = 600.0
START_SECONDS = 60.0  # for the predictor to bind its socket (it binds before importing torch)
SOCKET_PATH_MAX = 100  # AF_UNIX allows 107 bytes on Linux
MODULE = "ftbench_trainer.predict.resident"
# Set by a shell or a terminal, different from one command to the next, and read by no predictor.
VOLATILE = frozenset({"_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES", "TERM", "PS1", "PYTEST_CURRENT_TEST"})


def idle_seconds(env: Mapping[str, str]) -> float | None:
    """`FTBENCH_PREDICTOR`: seconds a resident predictor waits for the next question, None where it is `off`."""
    value = env.get(FTBENCH_PREDICTOR, "").strip().lower()
    if value == "off":
        return None
    try:
        return float(value) if value else DEFAULT_IDLE_SECONDS
    except ValueError:
        return DEFAULT_IDLE_SECONDS


def folder(env: Mapping[str, str]) -> Path:
    return cache_root(env) / "predictors"


def sources_digest(packages: Iterable[str] = ("ftbench", "ftbench_trainer")) -> str:
    """Path, size and modification time of every Python file of ftbench's packages as this process finds them."""
    import importlib.util

    digest = hashlib.sha256()
    for name in packages:
        found = importlib.util.find_spec(name)
        if found is None or not found.submodule_search_locations:
            continue
        for root in found.submodule_search_locations:
            for path in sorted(Path(root).rglob("*.py")):
                stat = path.stat()
                digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def socket_path(python: str, env: Mapping[str, str], cwd: str, lane: int = 0) -> Path:
    """The socket of the predictor for this interpreter, environment and folder; `lane` > 0: another predictor for
    them, beside it (a batch spread over several cores, ftbench.local.predict.run_batch)."""
    kept = {k: v for k, v in env.items() if k not in VOLATILE}
    lanes = [lane] if lane else []  # lane 0 is the one predictor of before lanes
    who = json.dumps([os.path.realpath(python), python, sorted(kept.items()), cwd, sources_digest(), *lanes])
    return folder(env) / f"{hashlib.sha256(who.encode()).hexdigest()[:20]}.sock"


def ask(
    python: str, env: Mapping[str, str], mode: str, plans: list[str], timeout: float, lane: int = 0
) -> tuple[str, str, int] | None:
    """(stdout, stderr, status) as `python -m ftbench_trainer.predict` would give them, from the resident
    predictor of `lane` (started where none answers); None where it is off or cannot be asked."""
    idle = idle_seconds(env)
    if idle is None:
        return None
    cwd = os.getcwd()
    path = socket_path(python, env, cwd, lane)
    if len(str(path)) > SOCKET_PATH_MAX:
        return None
    question = json.dumps({"mode": mode, "plans": plans}).encode() + b"\n"
    try:
        conn = _connect(path) or _start(python, env, cwd, path, idle)
        if conn is None:
            return None
        with conn:
            conn.settimeout(timeout)
            conn.sendall(question)
            reply = json.loads(_read_all(conn))
        return str(reply["stdout"]), str(reply["stderr"]), int(reply["status"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # the one-shot process answers instead


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        return None
    return conn


def _start(python: str, env: Mapping[str, str], cwd: str, path: Path, idle: float) -> socket.socket | None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _prune(path.parent)
    with open(path.with_suffix(".log"), "ab") as log:
        subprocess.Popen(
            [python, "-m", MODULE, "--socket", str(path), "--idle-seconds", str(idle)],
            env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if (conn := _connect(path)) is not None:
            return conn
        time.sleep(0.02)
    return None


def _prune(where: Path, older_than: float = 86400.0) -> None:
    """The log and lock files of predictors gone for a day (each environment or source change names a new one)."""
    for stale in [*where.glob("*.log"), *where.glob("*.lock")]:
        with contextlib.suppress(OSError):
            if not stale.with_suffix(".pid").exists() and time.time() - stale.stat().st_mtime > older_than:
                stale.unlink()


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(1 << 20):
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


def settle_all(env: Mapping[str, str] = os.environ, timeout: float = 600.0) -> int:
    """Let every resident predictor under this cache root record the step families its answers left waiting (the
    benches, before timing a call that follows a cold one: a user reading an answer gives it that time): how many
    answered."""
    settled = 0
    for path in folder(env).glob("*.sock"):
        with contextlib.suppress(OSError, ValueError):
            conn = _connect(path)
            if conn is not None:
                with conn:
                    conn.settimeout(timeout)
                    conn.sendall(json.dumps({"mode": "settle", "plans": []}).encode() + b"\n")
                    settled += json.loads(_read_all(conn))["status"] == 0
    return settled


def stop_all(env: Mapping[str, str] = os.environ, wait: float = 10.0) -> int:
    """Stop every resident predictor under this cache root (the benches between cases, the tests), waiting up to
    `wait` seconds for each to end: how many were asked to stop. It removes its pid file as it starts to leave and
    can run on for a second or more after (a trace to finish, the interpreter's teardown), on the core the next
    timed call wants, so the wait is for the process."""
    pids = []
    for pid_file in folder(env).glob("*.pid"):
        with contextlib.suppress(ValueError, OSError):
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
    deadline = time.monotonic() + wait
    while any(map(_running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(pids)


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, ended but not yet reaped by its parent, does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:  # no /proc (macOS)
        return _exists(pid)
    return bool(fields) and fields[0] != "Z"


def _exists(pid: int) -> bool:
    """Whether the kernel knows process `pid` (another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
