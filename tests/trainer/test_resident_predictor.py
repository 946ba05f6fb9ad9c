"""The resident predictor (ftbench_trainer.predict.resident, asked by ftbench.local.resident): `ftbench predict`
answers through it exactly as a predictor process of its own answers, and it keeps to its socket's rules (a stale
socket replaced, one predictor per socket, an unreadable question refused with the reason, exit when idle or
told to)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ftbench.cli import main
from ftbench.contracts.env import (
    FTBENCH_CACHE,
    FTBENCH_HOME,
    FTBENCH_PREDICT_PROCESSES,
    FTBENCH_PREDICTOR,
    FTBENCH_TRACE_CACHE,
)
from ftbench.local import resident

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from predict_latency import without_timings  # noqa: E402

QUICKSTART = REPO / "examples" / "quickstart.yaml"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache root of its own (short: a socket's path is at most 107 bytes), residents on, stopped after."""
    cache = Path(tempfile.mkdtemp(prefix="ftb-", dir="/tmp"))
    monkeypatch.setenv(FTBENCH_CACHE, str(cache))
    monkeypatch.setenv(FTBENCH_HOME, str(tmp_path / "home"))
    monkeypatch.setenv(FTBENCH_PREDICTOR, "120")
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "OMP_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    yield cache
    resident.stop_all({FTBENCH_CACHE: str(cache)})
    shutil.rmtree(cache, ignore_errors=True)


def predicted(capsys: pytest.CaptureFixture[str], path: Path) -> Any:
    assert main(["predict", str(path), "-o", "json"]) == 0
    return without_timings(json.loads(capsys.readouterr().out))


def one_shot(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path) -> Any:
    monkeypatch.setenv(FTBENCH_PREDICTOR, "off")
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, "off")
    return predicted(capsys, path)


def test_predict_answers_through_the_resident_as_a_predictor_process_does(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = predicted(capsys, QUICKSTART)
    (sock,) = (root / "predictors").glob("*.sock")
    again = predicted(capsys, QUICKSTART)
    assert sock.with_suffix(".log").read_text().count("predictor: answered plan of 1") == 2
    assert first == again == one_shot(monkeypatch, capsys, QUICKSTART)


def test_a_sweep_is_answered_through_the_resident_as_a_predictor_process_does(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    template = yaml.safe_load(QUICKSTART.read_text())["spec"]
    doc = {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneSweep", "metadata": {"name": "batches"},
           "spec": {"template": template, "matrix": {"batchSize": [2, 4]}}}  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    through = predicted(capsys, path)
    (sock,) = (root / "predictors").glob("*.sock")
    assert "predictor: answered batch of 2" in sock.with_suffix(".log").read_text()
    assert len(through["points"]) == 2 and through == one_shot(monkeypatch, capsys, path)


def test_a_sweep_of_steps_that_share_no_trace_spreads_over_two_residents(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four sequence lengths share no trace: two each to two resident predictors (lanes), answered as one
    predictor process answers them all."""
    monkeypatch.setenv(FTBENCH_PREDICT_PROCESSES, "2")
    template = yaml.safe_load(QUICKSTART.read_text())["spec"]
    doc = {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneSweep", "metadata": {"name": "lengths"},
           "spec": {"template": template, "matrix": {"modelMaxLength": [256, 320, 384, 512]}}}  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    through = predicted(capsys, path)
    socks = sorted((root / "predictors").glob("*.sock"))
    assert len(socks) == 2
    assert all("predictor: answered batch of 2" in s.with_suffix(".log").read_text() for s in socks)
    monkeypatch.setenv(FTBENCH_PREDICT_PROCESSES, "1")
    assert len(through["points"]) == 4 and through == one_shot(monkeypatch, capsys, path)


def test_min_gpus_is_answered_through_the_resident_as_a_predictor_process_does(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--min-gpus` after a predict asks the resident every GPU count and batch it tries (one batch of plans, from
    the step families the predict left) and answers as a predictor process of its own does from the same store
    (that a kept answer is the uncached one: test_trace_store, test_step_family, the latency bench)."""
    spec = {"experiment": "finetune_full_benchmark-v1.0.0", "engine": "trl", "model": "llama3.2-1b",
            "modelMaxLength": 256, "numberGpus": 2, "gpuModel": "NVIDIA-A100-SXM4-80GB", "batchSize": 4,
            "maxSteps": 10}  # fmt: skip
    path = tmp_path / "shapes.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneExperiment",
                                    "metadata": {"name": "shapes"}, "spec": spec}))  # fmt: skip
    predicted(capsys, path)
    assert resident.settle_all() == 1
    assert main(["predict", str(path), "-o", "json", "--min-gpus"]) == 0
    through = without_timings(json.loads(capsys.readouterr().out))
    (sock,) = (root / "predictors").glob("*.sock")
    assert "predictor: answered batch of" in sock.with_suffix(".log").read_text()
    monkeypatch.setenv(FTBENCH_PREDICTOR, "off")
    assert main(["predict", str(path), "-o", "json", "--min-gpus"]) == 0
    alone = without_timings(json.loads(capsys.readouterr().out))
    assert through["shapes"]["shapesTried"] >= 4 and through == alone


def start(path: Path, idle: float = 120.0) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", resident.MODULE, "--socket", str(path), "--idle-seconds", str(idle)])


def ask_raw(path: Path, question: bytes, deadline: float = 60.0) -> dict[str, Any]:
    until = time.monotonic() + deadline
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(str(path))
            except OSError:
                if time.monotonic() > until:
                    raise
                time.sleep(0.05)
                continue
            conn.sendall(question)
            return dict(json.loads(resident._read_all(conn)))


def test_a_stale_socket_is_replaced_and_an_unreadable_question_refused_with_the_reason(root: Path) -> None:
    path = root / "predictors" / "stale.sock"
    path.parent.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:  # a predictor that died without cleaning up
        dead.bind(str(path))
    proc = start(path)
    garbage = ask_raw(path, b"not json\n")
    assert garbage["status"] == 2 and "could not read it" in garbage["stderr"]
    refused = ask_raw(path, json.dumps({"mode": "batch", "plans": ["{}"]}).encode() + b"\n")
    assert refused["status"] == 0 and refused["stdout"].startswith("FTBENCH_PREDICTION_ERROR ")
    assert (path.stat().st_mode & 0o777) == 0o600
    assert resident.stop_all({FTBENCH_CACHE: str(root)}) == 1
    assert proc.wait(timeout=30) == 0 and not path.exists() and not path.with_suffix(".pid").exists()


def test_one_predictor_per_socket_and_an_idle_one_exits(root: Path) -> None:
    path = root / "predictors" / "idle.sock"
    first = start(path, idle=3.0)
    assert ask_raw(path, b"{}\n")["status"] == 2  # bound and answering
    second = start(path)
    assert second.wait(timeout=60) == 0  # the socket is served: it leaves at once
    assert first.wait(timeout=60) == 0 and not path.exists()  # idle for 3 s: gone, its socket with it


@pytest.mark.fms
def test_a_new_steps_family_is_recorded_after_the_answer_and_answers_the_next_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The resident answers a new step from its trace alone and records the step's family after replying; the next
    batch is then the family replayed, equal to a predictor process's uncached answer (fms-hf-tuning: under trl no
    family is kept)."""
    from ftbench.engines.envs import cache_root as engines_dir
    from tests.trainer.helpers import fms_env_python

    fms_env_python("3.1.0")
    cache = Path(tempfile.mkdtemp(prefix="ftb-", dir="/tmp"))  # a root of its own, its engines the usual ones
    (cache / "engines").symlink_to(engines_dir())
    monkeypatch.setenv(FTBENCH_CACHE, str(cache))
    predictors = resident.folder(os.environ)
    monkeypatch.setenv(FTBENCH_HOME, str(tmp_path / "home"))
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, str(tmp_path / "traces"))
    monkeypatch.setenv(FTBENCH_PREDICTOR, "120")
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "OMP_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    spec = {"experiment": "finetune_full_benchmark-v1.0.0", "engine": "fms-hf-tuning", "fmsHfTuningVersion": "3.1.0",
            "model": "llama3.2-1b", "modelMaxLength": 512, "numberGpus": 1, "gpuModel": "NVIDIA-A100-SXM4-80GB",
            "batchSize": 2, "maxSteps": 10}  # fmt: skip
    paths = []
    for batch in (2, 3):
        path = tmp_path / f"b{batch}.yaml"
        doc = {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneExperiment", "metadata": {"name": f"b{batch}"},
               "spec": {**spec, "batchSize": batch}}  # fmt: skip
        path.write_text(yaml.safe_dump(doc))
        paths.append(path)
    try:
        predicted(capsys, paths[0])
        (pid,) = predictors.glob("*.pid")
        assert len(list((tmp_path / "traces").rglob("*.json"))) == 1  # answered from its trace alone
        assert resident.settle_all() == 1  # what a user's reading gives it: the family recorded
        assert len(list((tmp_path / "traces").rglob("*.json"))) == 2  # the trace and its family
        third = predicted(capsys, paths[1])
        assert pid.with_suffix(".log").read_text().count("predictor: answered plan of 1") == 2
        assert third == one_shot(monkeypatch, capsys, paths[1])
    finally:
        resident.stop_all()
        shutil.rmtree(cache, ignore_errors=True)
