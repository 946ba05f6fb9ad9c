"""`ftbench report` and `ftbench results compare` over a results store written as `ftbench sweep` writes it.

The store holds a 2 GPU-count x 5 batch sweep with 2 repeats, where the largest per-device batches
ran out of GPU memory (one was then skipped by the OOM pruning), a CPU sweep with no GPU data, and
runs of their own. The rows are written with `ResultsStore.record` directly: these tests are about
reading and drawing them (a real CPU sweep is tested with `ftbench sweep`).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import FineTuneSweepSpec
from ftbench.catalog import load_catalog
from ftbench.cli import main
from ftbench.contracts.results import Outcome, TrainerResult
from ftbench.local.store import ResultsStore, SweepSlot
from ftbench.report.data import from_store
from ftbench.sweep.points import expand

pytest.importorskip("matplotlib")

GPU_SWEEP = {
    "template": {"experiment": "finetune_lora_benchmark-v1.0.0", "engine": "trl", "model": "llama3.1-8b",
                 "datasetId": "news-tokens-16384plus-entries-4096", "modelMaxLength": 1024,
                 "gpuModel": "NVIDIA-A100-SXM4-80GB", "maxSteps": 20},
    "matrix": {"numberGpus": [1, 2], "batchSize": [2, 4, 8, 16, 32]},
    "repeats": 2,
}  # fmt: skip
CPU_SWEEP = {
    "template": {"experiment": "finetune_lora_benchmark-v1.0.0", "engine": "trl", "model": "ftbench-tiny-llama",
                 "datasetId": "news-chars-512-entries-4096", "numberGpus": 0, "maxSteps": 10, "modelMaxLength": 512,
                 "torchDtype": "float32", "gradientCheckpointing": False},
    "matrix": {"batchSize": [2, 4]},
}  # fmt: skip
# Per-device batch at which a GPU count runs out of memory.
OOM_AT = {1: 8, 2: 16}
START = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def metrics(tokens_per_second: float, memory: float, mfu: float, step: float) -> dict[str, Any]:
    return {
        "trainRuntimeSeconds": 20 * step, "trainSteps": 20, "trainSamples": 80, "trainTokens": 81920,
        "trainNonPaddingTokens": 80000, "trainSamplesPerSecond": 4 / step, "trainStepsPerSecond": 1 / step,
        "trainTokensPerSecond": tokens_per_second, "trainTokensPerGpuPerSecond": tokens_per_second,
        "datasetTokensPerSecond": 0.9 * tokens_per_second, "datasetTokensPerSecondPerGpu": 0.9 * tokens_per_second,
        "gpuMemoryUtilizationPeakPercent": memory, "mfuPercent": mfu, "stepTimeP50Seconds": step,
        "stepTimeP95Seconds": 1.1 * step, "stepTimeCv": 0.02,
    }  # fmt: skip


def succeeded(m: dict[str, Any]) -> TrainerResult:
    return TrainerResult.model_validate({"outcome": "Succeeded", "isValid": True, "metrics": m})


def out_of_memory() -> TrainerResult:
    return TrainerResult.model_validate({
        "outcome": "GpuOom", "isValid": False, "reason": "GpuOutOfMemory",
        "error": {"type": "torch.OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2.00 GiB"},
    })  # fmt: skip


class Recorder:
    """Writes runs into the store one second apart, as `ftbench run` and `ftbench sweep` do."""

    def __init__(self, home: Path) -> None:
        self.store = ResultsStore(home / "results.db")
        self.count = 0

    def run(self, name: str, spec: FineTuneExperimentSpec, result: TrainerResult,
            slot: SweepSlot | None = None) -> str:  # fmt: skip
        self.count += 1
        run_id = f"20261120-1200{self.count:02d}-{self.count:06x}"
        status = "Succeeded" if result.outcome == Outcome.SUCCEEDED else "Invalid"
        self.store.record(run_id=run_id, name=name, spec=spec, started_at=START + timedelta(seconds=self.count),
                          status=status, results=[result], run_dir=Path("/nonexistent") / run_id, slot=slot)  # fmt: skip
        return run_id

    def sweep(self, name: str, body: dict[str, Any], measure: Any) -> None:
        """Record the sweep and run its points smallest first, skipping what the pruning skips."""
        self.store.save_sweep(name, body)
        spec = FineTuneSweepSpec.model_validate(body)
        for point in expand(spec, load_catalog()).points:
            assert point.spec is not None
            for repeat in range(spec.repeats):
                result = measure(point.spec, repeat)
                if result is None:
                    break  # not run: predicted to run out of memory
                self.run(f"{name}-{point.index}-{repeat}", point.spec, result, SweepSlot(name, point.index, repeat))
                if result.outcome == Outcome.GPU_OOM:
                    break


def gpu_measure(spec: FineTuneExperimentSpec, repeat: int) -> TrainerResult | None:
    per_device = spec.batch_size // spec.number_gpus
    if spec.number_gpus == 1 and per_device > OOM_AT[1]:
        return None  # above the OOM point: Skipped
    if per_device >= OOM_AT[spec.number_gpus]:
        return out_of_memory()
    tokens = 1000.0 * spec.number_gpus * per_device**0.5 * (1.0 + 0.02 * repeat)
    memory = 20.0 + 9.0 * per_device + 4.0 * spec.number_gpus
    return succeeded(metrics(tokens, memory, 30.0 + per_device - spec.number_gpus, 0.5 + 0.01 * repeat))


def cpu_measure(spec: FineTuneExperimentSpec, repeat: int) -> TrainerResult:
    return succeeded(metrics(100.0 * spec.batch_size, 0.0, 0.0, 0.25))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FTBENCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def recorded(home: Path) -> Recorder:
    recorder = Recorder(home)
    recorder.sweep("gpu-sweep", GPU_SWEEP, gpu_measure)
    recorder.sweep("cpu-sweep", CPU_SWEEP, cpu_measure)
    plain = FineTuneExperimentSpec.model_validate(CPU_SWEEP["template"] | {"batchSize": 4})
    recorder.run("quickstart", plain, succeeded(metrics(400.0, 0.0, 0.0, 0.3)))
    recorder.run("quickstart", plain, succeeded(metrics(440.0, 0.0, 0.0, 0.27)))
    return recorder


def table(md: str, heading: str) -> list[dict[str, str]]:
    """The first Markdown table after `heading`, as dicts."""
    section = md.split(heading, 1)[1].split("\n\n|", 1)[1]
    lines = ("|" + section).split("\n\n", 1)[0].splitlines()
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


def test_report_tables_and_plot_files(recorded: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["report", "-o", str(out)]) == 0
    assert "report.md" in capsys.readouterr().out
    md = (out / "report.md").read_text()
    rows = {r["point"]: r for r in table(md, "## Sweep gpu-sweep")}
    assert len(rows) == 10
    assert rows["1"]["per-device batch"] == "4" and rows["1"]["phase"] == "Succeeded" and rows["1"]["repeats"] == "2"
    assert rows["2"]["phase"] == "GpuOom" and "CUDA out of memory" in rows["2"]["note"]
    assert [rows[p]["phase"] for p in "34"] == ["Skipped"] * 2
    assert rows["4"]["note"] == "predicted OOM from point 2 (numberGpus=1, batchSize=8)"
    assert rows["9"]["per-device batch"] == "16" and rows["9"]["phase"] == "GpuOom"
    # the table is plan_sweep's: means over repeats, CV of the repeats' median step times
    assert rows["0"]["tokens/s"] == f"{1000 * 2**0.5 * 1.01:,.1f}" and rows["0"]["step-time CV"] == "1.4%"
    assert "Best: point 8 (numberGpus=2, batchSize=16)" in md
    cpu = table(md, "## Sweep cpu-sweep")
    assert [r["peak GPU mem %"] for r in cpu] == ["0.0", "0.0"] and cpu[1]["tokens/s"] == "400.0"
    plain = table(md, "## Runs outside sweeps")
    assert [r["tokens/s"] for r in plain] == ["400.0", "440.0"]
    images = re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", md)
    assert len(images) == 12 and all((out / file).stat().st_size > 5000 for _, file in images)
    assert ("Peak GPU memory and the OOM frontier: peak GPU memory (% of device memory) vs per-device batch "
            "(samples per GPU per step)", "gpu-sweep-memory.png") in images  # fmt: skip
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 12
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing outside the file


def test_report_of_one_sweep_in_svg(recorded: Recorder, tmp_path: Path) -> None:
    assert main(["report", "--sweep", "cpu-sweep", "--format", "svg", "-o", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "## Sweep cpu-sweep" in md and "gpu-sweep" not in md and "Runs outside sweeps" not in md
    page = (tmp_path / "report.html").read_text()
    assert page.count("<svg") == 4 and "<?xml" not in page
    # CPU runs: the plots say what is missing rather than failing
    assert "no GPU memory measured" in page and "no MFU measured" in page
    assert "one repeat per point: no spread to measure" in page


def test_report_usage_errors(recorded: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--sweep", "nope", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no sweep 'nope'" in err and "gpu-sweep" in err
    assert main(["report", "--namespace", "x", "-o", str(tmp_path)]) == 2
    assert "--from-cluster" in capsys.readouterr().err


def test_report_of_an_empty_store(home: Path, tmp_path: Path) -> None:
    assert main(["report", "-o", str(tmp_path)]) == 0
    assert "No runs yet" in (tmp_path / "report.md").read_text()


def test_store_loader_keeps_every_repeat(recorded: Recorder) -> None:
    data = from_store(recorded.store, load_catalog(), "gpu-sweep")
    [sweep] = data.sweeps
    assert [(r.point, r.repeat) for r in sweep.runs if r.point == 0] == [(0, 0), (0, 1)]
    assert {r.phase for r in sweep.runs if r.point in (3, 9)} == {"GpuOom"}
    assert json.dumps(sweep.runs[0].spec)  # wire form
