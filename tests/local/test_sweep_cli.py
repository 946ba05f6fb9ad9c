"""`ftbench sweep`: a real 2x2 CPU sweep, resume after Ctrl-C, reuse, pruning, and the store it keeps."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from ftbench.api.sweep import FineTuneSweepSpec
from ftbench.catalog import load_catalog
from ftbench.cli import main
from ftbench.contracts.results import Outcome, RunError, TrainerResult
from ftbench.local.store import ResultsStore, SweepSlot
from ftbench.sweep.points import expand
from tests.local.report_cases import table
from tests.local.terminal import foreground

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "sweep.yaml"


def write_sweep(path: Path, name: str, **spec_fields: object) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = name
    doc["spec"].update(spec_fields)
    path.write_text(yaml.safe_dump(doc))
    return path


def sweep_json(capsys: pytest.CaptureFixture[str]) -> dict:
    out = capsys.readouterr().out
    return json.loads(out[out.index("{") :])


@pytest.mark.training
def test_example_sweep_runs_resumes_and_is_reused(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("trl")
    assert main(["sweep", str(EXAMPLE), "--dataset-entries", "32", "-o", "json"]) == 0
    result = sweep_json(capsys)
    assert result["phase"] == "Succeeded" and result["counts"]["succeeded"] == 4
    assert [r["values"] for r in result["points"]] == [
        {"batchSize": b, "modelMaxLength": n} for b in (2, 4) for n in (320, 512)
    ]
    assert all(r["trainTokensPerSecond"] > 0 and r["datasetTokensPerSecond"] > 0 for r in result["points"])
    store = ResultsStore(home / "results.db")
    runs = store.runs(sweep="quickstart-sweep")
    assert sorted((r.point, r.repeat, r.status) for r in runs) == [(p, 0, "Succeeded") for p in range(4)]
    assert {r.name for r in runs} == {f"quickstart-sweep-p{p}-r0" for p in range(4)}

    # The report of this sweep: the same table, and the plots.
    assert main(["report", "--sweep", "quickstart-sweep", "-o", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Sweep quickstart-sweep" in report and "4 points (4 Succeeded)" in report
    assert (tmp_path / "report" / "report.html").stat().st_size > 10_000

    # The spec is the record: running it again needs --resume, which finds nothing left to run.
    assert main(["sweep", str(EXAMPLE)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["sweep", str(EXAMPLE), "--resume"]) == 0
    assert len(store.runs()) == 4
    changed = write_sweep(tmp_path / "changed.yaml", "quickstart-sweep", repeats=2)
    assert main(["sweep", str(changed), "--resume"]) == 2
    assert "another spec" in capsys.readouterr().err

    # Another sweep over the same points with reuse takes these results and trains nothing.
    again = write_sweep(tmp_path / "again.yaml", "again", reuse=True)
    assert main(["sweep", str(again), "-o", "json"]) == 0
    reused = sweep_json(capsys)
    assert reused["counts"]["reused"] == 4 and len(store.runs()) == 4
    assert [r["experiments"] for r in reused["points"]] == [[r.id] for r in sorted(runs, key=lambda r: r.point)]


@pytest.mark.training
def test_ctrl_c_then_resume_runs_only_what_did_not_finish(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("trl")
    path = write_sweep(
        tmp_path / "long.yaml",
        "long",
        matrix={"maxSteps": [2, 100000]},
        template={**yaml.safe_load(EXAMPLE.read_text())["spec"]["template"], "batchSize": 2,
                  "modelMaxLength": 256, "stopAfterSeconds": 30},
    )  # fmt: skip
    command = [sys.executable, "-m", "ftbench", "sweep", str(path), "--dataset-entries", "32"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
                            preexec_fn=foreground)  # fmt: skip
    store_path = home / "results.db"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # point 1's trainer has started (Ctrl-C may come at any moment)
        runs = ResultsStore(store_path).runs() if store_path.exists() else []
        logs = [Path(r.run_dir) / "trainer.log" for r in runs if r.point == 1]
        if logs and logs[0].exists() and logs[0].stat().st_size > 0:
            time.sleep(2)
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(f"point 1 never started: {proc.communicate()[1][-2000:]}")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "--resume" in err
    before = ResultsStore(store_path).runs()
    assert [(r.point, r.status) for r in before] == [(0, "Succeeded"), (1, "Interrupted")]

    done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    after = ResultsStore(store_path).runs()
    assert [(r.point, r.status) for r in after] == [(0, "Succeeded"), (1, "Interrupted"), (1, "Succeeded")]
    assert after[0].id == before[0].id  # point 0 did not run again


def _oom(started: datetime) -> TrainerResult:
    """A GPU OOM result: a fault a CPU cannot produce, written where the trainer would have written it."""
    error = RunError(type="torch.OutOfMemoryError", message="CUDA out of memory. Tried to allocate 2.00 GiB")
    return TrainerResult(outcome=Outcome.GPU_OOM, is_valid=False, reason="GpuOutOfMemory", error=error,
                         started_at=started, finished_at=started)  # fmt: skip


def test_an_oom_prunes_the_larger_points_without_running_them(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_sweep(tmp_path / "s.yaml", "pruned")
    spec = FineTuneSweepSpec.model_validate(yaml.safe_load(path.read_text())["spec"])
    store = ResultsStore(home / "results.db")
    store.save_sweep("pruned", spec.to_wire())
    first = expand(spec, load_catalog()).points[0]
    assert first.spec is not None
    now = datetime.now(UTC)
    store.record(run_id="oom-0", name="pruned-p0-r0", spec=first.spec, started_at=now, status="Invalid",
                 results=[_oom(now)], run_dir=tmp_path, slot=SweepSlot("pruned", 0, 0))  # fmt: skip
    assert main(["sweep", str(path), "--resume", "-o", "json"]) == 0
    result = sweep_json(capsys)
    assert [r["phase"] for r in result["points"]] == ["GpuOom", "Skipped", "Skipped", "Skipped"]
    assert result["points"][3]["message"] == "predicted OOM from point 0 (batchSize=2, modelMaxLength=320)"
    assert len(store.runs()) == 1  # nothing trained


def test_invalid_sweeps_are_refused_with_the_field(home: Path, tmp_path: Path, capsys) -> None:
    bad = write_sweep(tmp_path / "bad.yaml", "bad", matrix={"batchsize": [1]})
    assert main(["sweep", str(bad)]) == 2
    assert "spec.matrix.batchsize" in capsys.readouterr().err
    assert main(["validate", str(bad)]) == 1
    assert "spec.matrix.batchsize" in capsys.readouterr().out
    mixed = write_sweep(tmp_path / "mixed.yaml", "mixed", matrix={"batchSize": [2, 3], "modelMaxLength": [256]},
                        template={"model": "ftbench-tiny-llama", "numberGpus": 2, "gpuModel": "G"})  # fmt: skip
    assert main(["validate", str(mixed)]) == 0
    out = capsys.readouterr().out
    assert "valid sweep, 2 points, 1 invalid" in out and "point 1 (batchSize=3, modelMaxLength=256): spec." in out


def test_a_store_from_before_sweeps_gains_the_columns(home: Path) -> None:
    home.mkdir(parents=True)
    with sqlite3.connect(home / "results.db") as db:
        db.execute(
            "CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT,"
            " experiment TEXT NOT NULL, engine TEXT NOT NULL, model TEXT NOT NULL, number_gpus INTEGER NOT NULL,"
            " batch_size INTEGER NOT NULL, model_max_length INTEGER NOT NULL, status TEXT NOT NULL, is_valid INTEGER,"
            " train_tokens_per_second REAL, run_dir TEXT NOT NULL, spec_json TEXT NOT NULL, results_json TEXT NOT NULL)"
        )
        db.execute("INSERT INTO runs VALUES ('r1','old','2026-01-01',NULL,'e','trl','m',0,2,64,'Failed',NULL,NULL,"
                   "'/tmp','{}','[]')")  # fmt: skip
    db.close()
    [old] = ResultsStore(home / "results.db").runs()
    assert old.name == "old" and old.sweep is None and old.point is None


@pytest.mark.training
@pytest.mark.slow
def test_packing_sweep_example_runs_with_its_report(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/packing-sweep.yaml (packing x attention x checkpointing, 8 CPU points) runs, each
    option is in effect in every result, and the report shows each toggle's effect with its spread."""
    pytest.importorskip("trl")
    example = REPO / "examples" / "packing-sweep.yaml"
    assert main(["sweep", str(example), "--dataset-entries", "64", "-o", "json"]) == 0
    result = sweep_json(capsys)
    assert result["phase"] == "Succeeded" and result["counts"]["succeeded"] == 8
    for run in ResultsStore(home / "results.db").runs(sweep="packing-sweep"):
        (trained,) = [TrainerResult.model_validate(r) for r in run.results]
        spec, env, m = run.spec, trained.environment, trained.metrics
        assert env is not None and m is not None
        assert env.packing == ("positionIds" if spec["packing"] else "")
        assert env.attention_implementation == spec["attentionImplementation"]
        assert env.activation_checkpointing == spec["gradientCheckpointing"]
        assert (m.train_tokens == m.train_non_padding_tokens) == spec["packing"] and m.cpu_peak_rss_bytes > 0
    assert main(["report", "--sweep", "packing-sweep", "-o", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "### Effects in packing-sweep" in report
    effects = table(report, "### Effects in packing-sweep")
    fields = {(r["field"], r["metric"]) for r in effects}
    for field in ("packing", "attentionImplementation", "gradientCheckpointing"):
        assert {(field, "datasetTokensPerSecond"), (field, "peakMemory")} <= fields
    packing = next(r for r in effects if (r["field"], r["metric"]) == ("packing", "datasetTokensPerSecond"))
    assert packing["pairs"] == "4" and packing["change"] == "False -> True" and packing["beyond noise"]


@pytest.mark.training
def test_a_search_measures_its_budget_and_skips_the_rest_with_the_reason(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec.search on this machine (issue 61): CPU points have no prediction, so the search measures in point order,
    half the points (fraction 0.5), and ends the rest Skipped saying so; --resume runs nothing again."""
    pytest.importorskip("trl")
    path = write_sweep(tmp_path / "search.yaml", "search-sweep", search={"fraction": 0.5})
    assert main(["sweep", str(path), "--dataset-entries", "32", "-o", "json"]) == 0
    result = sweep_json(capsys)
    assert result["phase"] == "Succeeded"
    assert (result["counts"]["succeeded"], result["counts"]["skipped"]) == (2, 2)
    skipped = [r for r in result["points"] if r["phase"] == "Skipped"]
    assert all(r["message"].startswith("search: not measured, the budget of 2 trials is spent") for r in skipped)
    assert main(["sweep", str(path), "--resume"]) == 0
    assert len(ResultsStore(home / "results.db").runs(sweep="search-sweep")) == 2
    # The report: the front of what was measured, why the rest was not, and the best as a ready experiment.
    assert main(["report", "--sweep", "search-sweep", "-o", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "### Pareto front of search-sweep" in md and "The search did not measure 2 points" in md
    assert main(["validate", str(tmp_path / "report" / "search-sweep-best.yaml")]) == 0
