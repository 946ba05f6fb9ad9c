"""The FSDP examples as a user runs them: `ftbench run examples/fsdp-cpu.yaml` reports FSDP in effect
with each of the two ranks holding half the model, and `ftbench sweep examples/fsdp-scaling.yaml`
(seed 004's study: 1 -> 2 -> 4 ranks, strategy x offload) gives a report with the scaling section,
its tables and plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftbench.cli import main

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.training, pytest.mark.slow]


def test_fsdp_cpu_example_shards_over_two_ranks(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("trl")
    assert main(["run", str(REPO / "examples" / "fsdp-cpu.yaml"), "--dataset-entries", "64", "-q", "-o", "json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{") :])
    r = result["results"][0] if "results" in result else result
    env, metrics = r["environment"], r["metrics"]
    assert env["distributedMode"] == "FSDP" and env["worldSize"] == 2 and env["device"] == "cpu"
    assert env["fsdp"]["version"] == 2 and env["fsdp"]["shardingStrategy"] == "FULL_SHARD"
    shares = [m["parameterBytes"] / metrics["modelParameterBytes"] for m in metrics["rankMemory"]]
    assert shares == pytest.approx([0.5, 0.5], rel=0.05)


def test_fsdp_scaling_example_report(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("trl")
    pytest.importorskip("matplotlib")
    assert main(["sweep", str(REPO / "examples" / "fsdp-scaling.yaml"), "--dataset-entries", "64"]) == 0
    capsys.readouterr()
    out = tmp_path / "report"
    assert main(["report", "--sweep", "fsdp-scaling", "-o", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "6 points (6 Succeeded)" in report
    assert "### Scaling and per-rank memory" in report and "These are CPU figures" in report
    section = report[report.index("### Scaling and per-rank memory") :]
    for config in ("1 rank", "FSDP FULL_SHARD", "FSDP SHARD_GRAD_OP", "FSDP FULL_SHARD + offload"):
        assert f"| {config} |" in section, config
    assert "Strategy x offload at 2 ranks:" in section
    for plot in ("fsdp-scaling-scaling-throughput.png", "fsdp-scaling-scaling-memory.png"):
        assert (out / plot).stat().st_size > 5_000
    # Under FULL_SHARD at 4 ranks each rank holds a quarter of the parameters.
    row = next(line for line in section.splitlines() if line.startswith("| 4 | FSDP FULL_SHARD |"))
    assert float(row.split("|")[8]) == pytest.approx(0.25, abs=0.02)
