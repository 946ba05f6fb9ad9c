"""The resident predictor: `python -m ftbench_trainer.predict.resident --socket PATH --idle-seconds N`.

`ftbench predict` asks the same engine environment again and again while a user changes batch or GPUs, and
`--min-gpus` and sweeps ask it many plans: a new predictor process pays torch's and transformers' imports
(about 4 s on one core) before its first trace, and a kept trace answers in a fraction of what the process
start costs. This process stays: it answers each question on a Unix socket with exactly what
`python -m ftbench_trainer.predict` would print (the same functions), one question at a time, and exits
after N seconds without one. ftbench.local.resident starts it and names the socket after everything that
decides an answer (the interpreter, its environment, the working directory, ftbench's sources), so a
question never reaches a predictor that would answer it differently.

A question is one JSON line, `{"mode": "plan" | "batch", "plans": [launch plan JSON, ...]}`; the answer one
JSON line, `{"stdout": ..., "stderr": ..., "status": N}`. The socket is the user's own (mode 0600 in a 0700
folder); a lock file keeps two predictors from binding one path and an exiting one from removing its
successor's socket.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from ftbench.contracts.plan import LaunchPlan
from ftbench_trainer.predict.__main__ import OFFLINE, batch_line, plan_answer
from ftbench_trainer.predict.model import families_after, record_waiting, waiting

MAX_QUESTION_BYTES = 64 << 20  # a 100-point sweep's plans are ~1 MB
# A new step's family (two to six traces) waits this long after an answer for a question that follows at once
# (the same spec again, a script's next call) before it is recorded; one that needs it records it first.
GRACE_SECONDS = 1.0


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def answering(path: Path) -> bool:
    """Whether a predictor answers on `path` now."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True


def answer(question: dict[str, Any]) -> dict[str, Any]:
    plans = [str(p) for p in question.get("plans", [])]
    if question.get("mode") == "batch":
        return {"stdout": "".join(batch_line(p) + "\n" for p in plans), "stderr": "", "status": 0}
    if question.get("mode") == "settle":  # the benches, before timing the next call: what a user's reading gives
        recorded = 0
        while record_waiting():
            recorded += 1
        return {"stdout": f"recorded {recorded} step families\n", "stderr": "", "status": 0}
    if question.get("mode") == "plan" and len(plans) == 1:
        with families_after():  # a new step's family is recorded once no question waits
            out, err, status = plan_answer(partial(LaunchPlan.from_json, plans[0]))
        return {"stdout": out, "stderr": err, "status": status}
    return {"stdout": "", "stderr": "ftbench: not a question for the predictor\n", "status": 2}


def read_line(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while not chunks or not chunks[-1].endswith(b"\n"):
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_QUESTION_BYTES:
            raise ValueError(f"a question over {MAX_QUESTION_BYTES} bytes")
    return b"".join(chunks)


def handle(conn: socket.socket) -> None:
    """One question answered on `conn` (a connection that says nothing is `answering`'s probe: no answer)."""
    conn.settimeout(None)
    started = time.monotonic()
    try:
        raw = read_line(conn)
        if not raw:
            return
        question = json.loads(raw)
        reply = answer(question)
        what = f"{question.get('mode')} of {len(question.get('plans', []))}"
    except (ValueError, OSError, AttributeError) as exc:
        reply = {"stdout": "", "stderr": f"ftbench: the predictor could not read it: {exc}\n", "status": 2}
        what = "an unreadable question"
    print(f"predictor: answered {what} in {time.monotonic() - started:.2f} s", file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):  # the asker went away
        conn.sendall(json.dumps(reply).encode() + b"\n")


def bind(path: Path) -> socket.socket | None:
    """The listening socket on `path`, or None where another predictor already answers there."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with locked(path):
        if answering(path):
            return None
        path.unlink(missing_ok=True)  # a predictor that died without removing it
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            server.bind(str(path))
        finally:
            os.umask(old)
        server.listen(64)
        path.with_suffix(".pid").write_text(f"{os.getpid()}\n")
        return server


def _stop(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM: leave through serve's cleanup


def serve(path: Path, idle_seconds: float) -> int:
    os.environ.update(OFFLINE)
    server = bind(path)
    if server is None:
        return 0
    signal.signal(signal.SIGTERM, _stop)
    try:
        while True:
            server.settimeout(GRACE_SECONDS if waiting() else idle_seconds)  # a question soon after goes first
            try:
                conn, _ = server.accept()
            except TimeoutError:
                started = time.monotonic()
                if not record_waiting():
                    break  # idle
                print(f"predictor: recorded a step family in {time.monotonic() - started:.2f} s", file=sys.stderr,
                      flush=True)  # fmt: skip
                continue
            with conn:
                handle(conn)
    except KeyboardInterrupt:
        pass
    finally:
        with locked(path):  # the socket goes with the process; a successor binds only once this one is gone
            server.close()
            path.unlink(missing_ok=True)
            path.with_suffix(".pid").unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftbench_trainer.predict.resident",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--idle-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    return serve(args.socket, args.idle_seconds)


if __name__ == "__main__":
    sys.exit(main())
