"""Each rank serves its live training metrics while it trains (issue 48 item 2).

A real CPU run of the tiny model with plan.output.metricsPort set, scraped from outside while it trains:
Prometheus' own parser reads the page, the step counter grows between scrapes, and every series carries
the experiment's labels and the rank. The names are ftbench.contracts.live_metrics'.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import OFFLINE_ENV, make_plan, write_plan

from ftbench.contracts.live_metrics import ALL, METRICS_PATH, PEAK_MEMORY, TOKENS_PER_SECOND, exposition
from ftbench.contracts.progress import ProgressUpdate
from ftbench.engines.envs import package_path
from ftbench.host.ports import free_port

pytestmark = [pytest.mark.training]
parser = pytest.importorskip("prometheus_client.parser")
PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in parser.text_string_to_metric_families(text)}


def test_the_page_parses_before_and_after_the_first_step() -> None:
    labels = {"namespace": "n", "name": 'x"y', "rank": "0"}
    assert not any(families(exposition(None, labels)).values())  # the families, no sample yet
    update = ProgressUpdate(step=3, total_steps=10, elapsed_seconds=1.5, tokens_per_second=100.0,
                            peak_memory_bytes=2048, memory_kind="cpuPeakRss")  # fmt: skip
    found = families(exposition(update, labels))
    [steps] = found["ftbench_trainer_steps"]  # the parser drops a counter's _total suffix
    assert steps.value == 3 and steps.labels == labels
    [peak] = found[PEAK_MEMORY.name]
    assert peak.labels["kind"] == "cpuPeakRss" and peak.value == 2048
    assert "ftbench_trainer_loss" in found and not found["ftbench_trainer_loss"]  # not logged yet: no sample


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{METRICS_PATH}", timeout=2) as answer:
            return answer.read().decode()
    except OSError:
        return None


def test_a_training_rank_serves_its_metrics_while_it_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    port = free_port()
    plan = make_plan(tmp_path, tiny_model_dir, tmp_path / "data", maxSteps=60, entries=64)
    plan = plan.model_copy(update={"output": plan.output.model_copy(update={"metrics_port": port})})
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": package_path()}
    cmd = [str(PYTHON), "-m", "ftbench_trainer.main", "--plan", str(write_plan(plan, tmp_path))]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    steps: list[float] = []
    page = ""
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and len(steps) < 2:
            text = scrape(port)
            found = families(text) if text else {}
            if found.get("ftbench_trainer_steps"):
                page = text or ""
                value = found["ftbench_trainer_steps"][0].value
                if not steps or value > steps[-1]:
                    steps.append(value)
            time.sleep(0.05)
    finally:
        out = proc.communicate(timeout=300)[0]
    assert len(steps) == 2, f"no growing step counter scraped (exit {proc.returncode}):\n{out[-3000:]}"
    assert proc.returncode == 0, out[-3000:]
    found = families(page)
    [sample] = found[TOKENS_PER_SECOND.name]
    assert sample.value > 0
    assert sample.labels == {"namespace": "", "name": "test", "experiment": plan.experiment.value,
                             "model": "ftbench-tiny-llama", "engine": "trl", "attempt": "0", "rank": "0"}  # fmt: skip
    assert {m.name.removesuffix("_total") for m in ALL} <= set(found)
    assert scrape(port) is None, "the server stops with the run"
