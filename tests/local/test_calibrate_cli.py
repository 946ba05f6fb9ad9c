"""`ftbench calibrate --profile FILE`, then `ftbench predict SPEC --profile FILE`: from a local results store (ftbench's
own H100 runs, bench/results), and from ado's rows (a few lines of the fleet sample, traced in their release's
environment as ado ran them); the profile's calibration section is written, validated and used by predict."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml

from ftbench.api.validation import load_profile
from ftbench.cli import main

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
H100_STORE = REPO / "bench" / "results" / "gpu-h100-2026-11-26" / "call1" / "trl" / "results.db"
SAMPLE = REPO.parent / "shared" / "data" / "ado-fleet" / "fleet-sample-A.csv"


def spec_file(tmp_path: Path, **spec: object) -> Path:
    doc = {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneExperiment", "metadata": {"name": "h"},
           "spec": {"experiment": "finetune_full_benchmark-v1.0.0", "engine": "trl", "model": "llama-7b",
                    "numberGpus": 1, "gpuModel": "NVIDIA-H100-80GB-HBM3", "batchSize": 8, "modelMaxLength": 2048,
                    **spec}}  # fmt: skip
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_calibrate_from_the_local_store_then_predict_with_it(home: Path, tmp_path: Path, capsys) -> None:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(H100_STORE, home / "results.db")
    profile = tmp_path / "profile.yaml"
    profile.write_text("# this cluster\ncpuPerGpu: 6\n")
    assert main(["calibrate", "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "GPU family H100  compute efficiency" in out and "GPU family H100  context" in out
    assert "memory" in out and "tokensPerSecond" in out  # before/after on those runs
    calibration = load_profile(profile).calibration
    assert calibration is not None and load_profile(profile).cpu_per_gpu == 6
    assert len(calibration.runs) == 4 and all(r.source.startswith("local:") for r in calibration.runs)
    assert calibration.gpu_families["H100"].context_offset_bytes is not None

    spec = spec_file(tmp_path)
    assert main(["predict", str(spec), "--profile", str(profile), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["calibration"]["name"] == calibration.name
    assert any(line.startswith("H100: compute efficiency") for line in report["calibration"]["applied"])
    assert report["fit"]["fleetAccuracy"]["outsideCalibration"] == []  # its H100 runs calibrated this question
    assert main(["predict", str(spec)]) == 0
    assert "calibration                       none: the fleet's constants" in capsys.readouterr().out


def ado_csv(tmp_path: Path, model: str, release: str, count: int) -> Path:
    rows = [r for r in csv.DictReader(io.StringIO(SAMPLE.read_text()))
            if r["model_name"] == model and r["fms_hf_tuning_version"] == release and r["is_valid"] == "1"][:count]  # fmt: skip
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / "ado.csv"
    path.write_text(out.getvalue())
    return path


def test_calibrate_from_ado_rows(home: Path, tmp_path: Path, capsys) -> None:
    """Three of ado's llama3.2-1b rows under fms-hf-tuning 3.1.0, each traced in that release's environment."""
    from tests.trainer.helpers import fms_env_python

    fms_env_python("3.1.0")
    rows = ado_csv(tmp_path, "llama3.2-1b", "3.1.0", 3)
    profile = tmp_path / "profile.yaml"
    assert main(["calibrate", "--profile", str(profile), "--ado", str(rows), "--name", "ado-rows"]) == 0
    calibration = load_profile(profile).calibration
    assert calibration is not None and calibration.name == "ado-rows"
    assert [r.source for r in calibration.runs] == ["ado:ado.csv:1", "ado:ado.csv:2", "ado:ado.csv:3"]
    assert all(r.engine == "fms-hf-tuning 3.1.0" and r.step_time_ratio for r in calibration.runs)
    model = calibration.models["llama3.2-1b"]
    assert model.runs == 3 and model.step_time_factor is not None
    assert {e.quantity for e in calibration.errors} == {"tokensPerSecond", "memory"}  # the rows were traced
    assert main(["calibrate", "--profile", str(tmp_path / "none.yaml"), "--skip-memory"]) == 2  # nothing measured
    assert "no run measured" in capsys.readouterr().err
