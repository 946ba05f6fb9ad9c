"""A cluster's own corrections (ftbench.predict.calibrate, the profile's calibration section): fitted on real runs
(ado's fleet rows as stored, ftbench's own H100 runs), applied to predictions, named in the status, validated
in the profile, and written into a profile file without touching the rest of it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from ftbench.api.calibration import Calibration, CalibrationRun
from ftbench.api.profile import DEFAULT_GPU_MEMORY, ClusterProfile
from ftbench.api.validation import load_checked_profile
from ftbench.catalog import load_catalog
from ftbench.cli.cmd_calibrate import from_record, write_section
from ftbench.local.store import ResultsStore
from ftbench.predict import fleet_accuracy as fa
from ftbench.predict.calibrate import Asked, Observation, fit_calibration, nearest, step_factor
from ftbench.predict.prediction import prediction_report
from ftbench.predict.throughput import predict_throughput

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import calibration_fleet  # noqa: E402
import fleet  # noqa: E402

CATALOG = load_catalog()
GIB = 2**30
H100_STORE = REPO / "bench" / "results" / "gpu-h100-2026-11-26" / "call1" / "trl" / "results.db"


@pytest.fixture(scope="module")
def fleet_rows() -> list[Any]:
    return calibration_fleet.rows(fleet.STORE)


def observe(row: Any) -> Observation:
    return Observation(f"ado:{row.line}", row.spec, row.point.measured, row.judged.measured_percent,
                       row.judged.prediction)  # fmt: skip


def fit(observations: list[Observation]) -> Calibration:
    return fit_calibration(observations, CATALOG, DEFAULT_GPU_MEMORY, name="test", fitted_at="2026-11-28T00:00:00Z")


def h100_observations(tmp_path: Path) -> list[Observation]:
    copy = tmp_path / "results.db"
    shutil.copy(H100_STORE, copy)
    return [o for r in ResultsStore(copy).runs() if (o := from_record(r, f"local:{r.id}"))]


def test_one_models_runs_correct_that_model_not_its_gpu_family(fleet_rows: list[Any]) -> None:
    """Three A100 runs of one model: the A100 is the fleet's family, so one model's runs are its own correction."""
    mine = [observe(r) for r in fleet_rows if r.spec.model == "llama3.2-1b"][:3]
    calibration = fit(mine)
    assert calibration.gpu_families == {}
    assert set(calibration.models) == {"llama3.2-1b"} and calibration.models["llama3.2-1b"].runs == 3
    assert all(r.step_time_ratio is not None for r in calibration.runs)
    assert [r.source for r in calibration.runs] == [o.source for o in mine]
    rate = next(e for e in calibration.errors if e.quantity == "tokensPerSecond")
    assert rate.runs == 3 and rate.median_after <= rate.median_before


def test_two_models_on_a_family_correct_the_family(fleet_rows: list[Any]) -> None:
    two = [
        observe(r) for m in ("llama3.2-1b", "granite-3.1-2b") for r in [x for x in fleet_rows if x.spec.model == m][:3]
    ]
    calibration = fit(two)
    a100 = calibration.gpu_families["A100"]
    assert a100.runs == 6 and a100.compute_efficiency is not None and a100.context_offset_bytes is not None


def test_a_family_the_fleet_never_ran_is_corrected_by_any_runs(tmp_path: Path) -> None:
    """ftbench's own H100 runs (llama-7b, one model): outside the fleet, so the family takes them, and a spec on an
    H100 is no longer said to be outside the calibration."""
    observations = h100_observations(tmp_path)
    assert len(observations) >= 3 and all(o.memory_percent for o in observations)
    calibration = fit(observations)
    assert calibration.gpu_families["H100"].compute_efficiency is not None
    spec = observations[0].spec
    assert any(line.startswith("GPU NVIDIA-H100") for line in fa.outside_calibration(spec, CATALOG))
    assert not any(line.startswith("GPU ") for line in fa.outside_calibration(spec, CATALOG, calibration))


def run(experiment: str, gpus: int, ratio: float, model: str = "m") -> CalibrationRun:
    return CalibrationRun(source="x", model=model, gpu_model="NVIDIA-A100-SXM4-80GB", experiment=experiment,
                          number_gpus=gpus, step_time_ratio=ratio)  # fmt: skip


def test_a_prediction_takes_its_nearest_runs_and_none_where_they_disagree() -> None:
    full, lora = "finetune_full_benchmark-v1.0.0", "finetune_lora_benchmark-v1.0.0"
    calibration = Calibration(name="c", fitted_at="t", runs=[run(full, 8, 1.2), run(full, 8, 1.4), run(lora, 1, 0.8),
                                                             run(lora, 1, 0.9), run(full, 1, 3.0)])  # fmt: skip
    assert nearest(calibration, Asked("m", full, 8), lambda r: r.step_time_ratio) == (pytest.approx(1.3), 2)
    assert step_factor(calibration, Asked("m", lora, 4)) == pytest.approx(0.85)  # no LoRA run on several: any LoRA
    assert step_factor(calibration, Asked("m", full, 2)) == pytest.approx(1.3)  # full on several GPUs
    assert step_factor(calibration, Asked("other", full, 8)) == 1.0  # another model: no correction
    wild = Calibration(name="c", fitted_at="t", runs=[run(full, 8, 1.0), run(full, 8, 9.0)])
    assert step_factor(wild, Asked("m", full, 8)) == 1.0  # 9x apart: a guess, not a correction


def test_multi_node_runs_fit_their_fabric(fleet_rows: list[Any]) -> None:
    nodes = [observe(r) for r in fleet_rows if r.spec.number_nodes > 1]
    calibration = fit(nodes)
    assert set(calibration.fabrics) <= {"rdma", "tcp"} and calibration.fabrics


def test_a_prediction_uses_the_profiles_calibration_and_names_it(fleet_rows: list[Any]) -> None:
    models = ("llama3.2-1b", "granite-3.1-2b")
    chosen = [r for m in models for r in [x for x in fleet_rows if x.spec.model == m][:3]]
    calibration = fit([observe(r) for r in chosen])
    profile = ClusterProfile(calibration=calibration)
    row = chosen[0]
    spec, prediction = row.spec, row.judged.prediction
    plain = prediction_report(prediction, spec, CATALOG, ClusterProfile())
    calibrated = prediction_report(prediction, spec, CATALOG, profile)
    assert plain.calibration is None and calibrated.calibration is not None
    assert calibrated.calibration.name == "test" and calibrated.calibration.runs == 6
    applied = calibrated.calibration.applied
    assert any(line.startswith("A100: compute efficiency") for line in applied)
    assert any(line.startswith("llama3.2-1b: step time") for line in applied)
    base = predict_throughput(spec, CATALOG)
    assert plain.throughput is not None and calibrated.throughput is not None and base is not None
    assert plain.throughput.tokens_per_second_estimate == base.tokens_per_second_estimate
    assert calibrated.throughput.tokens_per_second_estimate != base.tokens_per_second_estimate
    offset = calibration.gpu_families["A100"].context_offset_bytes
    assert offset is not None and plain.fit is not None and calibrated.fit is not None
    assert calibrated.fit.device is not None and plain.fit.device is not None
    assert calibrated.fit.device.term("context") == max(0, plain.fit.device.term("context") + offset)
    assert calibrated.to_wire()["calibration"]["name"] == "test"


def test_the_profile_refuses_a_bad_calibration_naming_the_field() -> None:
    good = "calibration:\n  name: c\n  fittedAt: t\n"
    assert load_checked_profile(good, "p.yaml").calibration is not None
    with pytest.raises(ValueError, match=r"calibration\.version"):
        load_checked_profile(good + "  version: 2\n", "p.yaml")
    with pytest.raises(ValueError, match="computeEfficiency"):
        load_checked_profile(good + "  gpuFamilies:\n    A100: {runs: 1, computeEfficiency: -1}\n", "p.yaml")
    with pytest.raises(ValueError, match="fabrics"):
        load_checked_profile(good + "  fabrics: {infiniband: 1e9}\n", "p.yaml")


def test_writing_the_section_keeps_the_rest_of_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text("# my cluster\ngpuResource: nvidia.com/gpu   # the device plugin's\ncalibration:\n  name: old\n"
                    "  fittedAt: t\ncpuPerGpu: 7\n")  # fmt: skip
    new = Calibration(name="new", fitted_at="t2", fabrics={"rdma": 5e10})
    write_section(path, new)
    write_section(path, new)  # again: the same file
    text = path.read_text()
    assert text.startswith("# my cluster\ngpuResource: nvidia.com/gpu   # the device plugin's\n")
    assert "cpuPerGpu: 7" in text and "name: old" not in text and text.count("ftbench calibrate") == 1
    profile = load_checked_profile(text, str(path))
    assert profile.calibration == new and profile.cpu_per_gpu == 7
    with pytest.raises(ValueError):
        write_section(tmp_path / "bad.yaml", new.model_copy(update={"name": ""}))
    assert not (tmp_path / "bad.yaml").exists()


def test_the_docs_table_is_the_calibration_bench(fleet_rows: list[Any]) -> None:
    """docs/benchmarks.md's table is what `bench/calibration_fleet.py --write-docs` writes (about a minute)."""
    pytest.importorskip("numpy")
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    section = calibration_fleet.SECTION
    committed = docs.split(f"<!-- {section}:start -->\n", 1)[1].split(f"\n<!-- {section}:end -->", 1)[0]
    assert committed == calibration_fleet.report(fleet_rows), "run: bench/calibration_fleet.py --write-docs"
