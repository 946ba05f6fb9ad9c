"""ado's fleet (bench/fleet.py): the table in docs/benchmarks.md is the tabulation of the stored predictions,
a few stored rows predict the same again in their releases' environments (a dense model, a granite MoE,
the granite-4.0-h hybrid), ado's rows import into the local results store, and a model a release's
transformers cannot build is one line saying so, never a traceback.

The whole sample (583 clean rows, five releases) takes minutes: `bench/fleet.py predict` runs it by hand."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers import REPO_ROOT, fms_env_python

pytest.importorskip("torch")

from ftbench.api.validation import validate_spec_dict
from ftbench.catalog import load_catalog
from ftbench.contracts.prediction import MAMBA_KERNELS_ENV, MemoryPrediction
from ftbench.local.predict import prediction_plan, run_batch
from ftbench.local.runner import TrainerPython
from ftbench.predict import fit_folds, fit_memory

SAMPLE = REPO_ROOT.parent / "shared" / "data" / "ado-fleet" / "fleet-sample-A.csv"
# Stored rows re-predicted live: (line, release) of a dense FSDP run, a granite MoE, the hybrid.
LIVE = {184: "2.4.0", 578: "3.0.0", 744: "3.1.0"}


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleet_bench", REPO_ROOT / "bench" / "fleet.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["fleet_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench()


@pytest.fixture(scope="module")
def stored(bench: ModuleType) -> dict[int, dict]:
    return {row["line"]: row for row in json.loads(bench.STORE.read_text())["rows"]}


def test_the_docs_table_is_the_stored_predictions_tabulated(bench: ModuleType):
    start, end = f"<!-- {bench.SECTION}:start -->", f"<!-- {bench.SECTION}:end -->"
    text = bench.DOCS.read_text()
    committed = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert committed == bench.tabulate(bench.STORE, write_docs=False).strip(), (
        "run: bench/fleet.py tabulate --write-docs"
    )


def test_the_error_bands_predictions_quote_are_the_stored_predictions_held_out(bench: ModuleType):
    """The bands are out of sample (grouped folds; a model left out), and the calibration domain is what the rows
    that ran cover: both as `tabulate --write-docs` generates them from the store."""
    from ftbench.predict import constants

    judged = bench.judge(bench.STORE)
    found = fit_memory.all_bands(fit_memory.out_of_sample(judged))
    assert found == {
        "MEMORY_BANDS": constants.MEMORY_BANDS,
        "MEMORY_UNSEEN_MODEL_BANDS": constants.MEMORY_UNSEEN_MODEL_BANDS,
    }, "run: bench/fleet.py tabulate --write-docs"
    domain = fit_memory.calibration_domain(judged)
    assert domain == {name: getattr(constants, name) for name in domain}, "run: bench/fleet.py tabulate --write-docs"


def test_folds_keep_configurations_repeats_and_full_lora_pairs_whole(bench: ModuleType, stored: dict[int, dict]):
    """No configuration, repeat or full/LoRA pair of the sample straddles two folds, and the folds are even."""
    specs = {line: row["spec"] for line, row in stored.items()}
    folds = fit_folds.grouped_folds(specs)
    by_group: dict[str, set[str]] = {}
    for line, spec in specs.items():
        by_group.setdefault(fit_folds.fold_group(spec), set()).add(folds[line])
    assert all(len(parts) == 1 for parts in by_group.values())
    for line, other in bench.partners(list(stored.values())).items():
        partner = next(n for n in (line - 1, line + 1) if n in specs and specs[n]["experiment"] != specs[line]["experiment"]
                       and fit_folds.fold_group(specs[n]) == fit_folds.fold_group(specs[line]))  # fmt: skip
        assert folds[partner] == folds[line], (line, other)
    sizes = [sum(1 for parts in by_group.values() if parts == {f}) for f in sorted(set(folds.values()))]
    assert len(sizes) == fit_folds.FOLDS and max(sizes) - min(sizes) <= 1


def test_held_out_rows_are_predicted_by_constants_fitted_without_them(bench: ModuleType):
    """Leaving a model out changes its rows' fitted terms and nothing else: the traced tensors stay."""
    judged = bench.judge(bench.STORE)
    held = {
        j.line: j
        for j in fit_memory.held_out(judged, {j.line: "out" for j in judged if j.spec["model"] == "llama3.1-70b"})
    }
    moved = [j for j in judged if j.device is not None and held[j.line].device != j.device]
    assert moved and all(j.spec["model"] == "llama3.1-70b" for j in moved)
    assert all(held[j.line].device.tensor_bytes == j.device.tensor_bytes for j in moved)


def test_clear_outcomes_need_a_smaller_run_and_no_larger_one(bench: ModuleType):
    spec = {"model": "m", "numberGpus": 2}
    rows = [
        {"line": 1, "isValid": True, "spec": {**spec, "modelMaxLength": 512, "batchSize": 8}},
        {"line": 2, "isValid": False, "spec": {**spec, "modelMaxLength": 512, "batchSize": 16}},
        {"line": 3, "isValid": False, "spec": {**spec, "modelMaxLength": 1024, "batchSize": 4}},  # nothing smaller
        {"line": 4, "isValid": False, "spec": {**spec, "modelMaxLength": 2048, "batchSize": 8}},
        {"line": 5, "isValid": True, "spec": {**spec, "modelMaxLength": 4096, "batchSize": 8}},  # so 4 was not OOM
    ]
    assert bench.outcomes(rows) == {1: "ran", 2: "oom", 5: "ran"}
    # A larger run with RoCE that ran says a failure without it was not memory; not the other way round.
    roce = {**spec, "enableRoce": True, "modelMaxLength": 512, "batchSize": 32}
    widened = bench.outcomes([*rows, {"line": 6, "isValid": True, "spec": roce}])
    assert 2 not in widened and widened[6] == "ran"
    sockets = {**spec, "enableRoce": False, "modelMaxLength": 512, "batchSize": 32}
    socket_rows = [{**r, "spec": {**r["spec"], "enableRoce": True}} for r in rows]
    assert bench.outcomes([*socket_rows, {"line": 6, "isValid": True, "spec": sockets}])[2] == "oom"


def test_a_rows_partner_is_the_other_experiment_of_the_same_configuration_on_the_adjacent_line(bench: ModuleType):
    spec = {"model": "m", "numberGpus": 32, "modelMaxLength": 512, "batchSize": 32}
    full, lora = "finetune_full_benchmark-v1.0.0", "finetune_lora_benchmark-v1.0.0"
    rows = [
        {"line": 1, "isValid": False, "spec": {**spec, "experiment": full}},
        {"line": 2, "isValid": True, "spec": {**spec, "experiment": lora}},
        {"line": 3, "isValid": True, "spec": {**spec, "experiment": full, "batchSize": 64}},  # another configuration
        {"line": 5, "isValid": True, "spec": {**spec, "experiment": lora, "batchSize": 64}},  # not adjacent to 3
        {"line": 6, "isValid": True, "spec": {**spec, "experiment": lora, "batchSize": 64}},  # same experiment as 5
    ]
    assert bench.partners(rows) == {1: "ran", 2: "failed"}


def test_the_llama_70b_lora_rows_whose_full_run_failed_are_paired_so_in_the_store(
    bench: ModuleType, stored: dict[int, dict]
):
    """docs/benchmarks.md's reading of ado's 4-node llama3.1-70b LoRA rows rests on these pairs of sample A."""
    paired = bench.partners(list(stored.values()))
    assert all(paired[line] == "failed" for line in (134, 136, 138, 140, 148, 156))
    assert paired[232] == paired[238] == paired[233] == paired[237] == "ran" and 224 not in paired


def test_the_stored_predictions_record_fast_moe_and_varying_expert_shapes(stored: dict[int, dict]):
    """What the reserve term's causes read (ftbench.predict.device_memory): fastMoe's degree on several ranks, and the
    4.x MoE experts' varying shapes, for every MoE row of the sample and no dense one."""
    from ftbench.predict.fleet_accuracy import MOE, kind

    models = load_catalog().models
    predicted = [row for row in stored.values() if "prediction" in row]
    for row in predicted:
        several = row["spec"]["numberGpus"] > 1
        assert row["prediction"]["expertParallel"] == (row["spec"].get("fastMoe", 0) if several else 0), row["line"]
        is_moe = kind(models[row["spec"]["model"]].architecture) == MOE
        assert row["prediction"]["expertShapesVary"] == is_moe, row["line"]
    assert any(row["prediction"]["expertParallel"] > 1 for row in predicted)


@pytest.mark.fms
@pytest.mark.slow
@pytest.mark.parametrize("line", sorted(LIVE))
def test_a_stored_row_predicts_the_same_in_its_release(line: int, stored: dict[int, dict], monkeypatch):
    from ftbench.api.profile import ClusterProfile
    from ftbench.engines.envs import package_path

    row = stored[line]
    assert row["spec"]["fmsHfTuningVersion"] == LIVE[line] and "prediction" in row
    report = validate_spec_dict(row["spec"], load_catalog())
    assert report.ok and report.spec is not None
    plan = prediction_plan(report.spec, f"ado-{line}", load_catalog(), ClusterProfile())
    monkeypatch.setenv(MAMBA_KERNELS_ENV, "true")  # as bench/fleet.py predicts ado's runs
    python = TrainerPython(str(fms_env_python(LIVE[line])), package_path())
    (answer,) = run_batch([plan], python)
    assert isinstance(answer, MemoryPrediction), answer
    assert answer.peak_bytes == row["prediction"]["peakBytes"]
    assert answer.activations_peak_bytes == row["prediction"]["activationsPeakBytes"]
    # transformers 4.x MoE experts (the granite MoE and the hybrid) make tensors of each expert's token count.
    assert answer.expert_shapes_vary == row["prediction"]["expertShapesVary"] == (line != 184)


@pytest.mark.fms
def test_a_model_the_release_cannot_build_is_one_line(tmp_path: Path):
    """granite-4.0-h needs transformers' granitemoehybrid (4.52+): fms-hf-tuning 2.4.0's stack (4.45) has none."""
    from ftbench.engines.envs import package_path

    spec = {"experiment": "finetune_lora_benchmark-v1.0.0", "engine": "fms-hf-tuning", "fmsHfTuningVersion": "2.4.0",
            "model": "granite-4.0-h-tiny", "numberGpus": 1, "batchSize": 1, "modelMaxLength": 512,
            "gpuModel": "NVIDIA-A100-SXM4-80GB"}  # fmt: skip
    from ftbench.api.profile import ClusterProfile

    report = validate_spec_dict(spec, load_catalog())
    assert report.spec is not None
    plan = prediction_plan(report.spec, "h", load_catalog(), ClusterProfile())
    (tmp_path / "plan.json").write_text(plan.to_json())
    env = {"PYTHONPATH": package_path(), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [str(fms_env_python("2.4.0")), "-m", "ftbench_trainer.predict", "--plan", str(tmp_path / "plan.json")],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("ftbench: transformers 4.45.2") and "granitemoehybrid" in lines[-1]
    assert "Traceback" not in proc.stderr


def test_ado_rows_import_beside_ftbench_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys):
    from ftbench.cli import main

    monkeypatch.setenv("FTBENCH_HOME", str(tmp_path / "home"))
    assert main(["results", "--import", "ado", str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "imported 617 of 787 ado row(s)" in out and "'3.0.0.1' is not a published release" in out
    assert main(["results"]) == 0
    listed = capsys.readouterr().out
    assert "ado's runs" in listed and "ado:fleet-sample-A.csv:23" in listed and "granite-4.0-h-tiny" in listed
    assert main(["results", "--import", "csv", str(SAMPLE)]) == 2
