"""bench/gpu/run.py, the GPU matrix in one command, run end to end in its CPU dry mode.

No GPU is lent to this project, so CI proves the command on CPU ranks with the tiny model: every
point of bench/gpu/matrix.yaml gets a row (runs, or a refusal with its reason), the results file and
the docs table are written, and the table replaces only its own section of the docs page.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[2]
RUN = ROOT / "bench" / "gpu" / "run.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_bench_run", RUN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_matrix_is_what_a_gpu_node_runs() -> None:
    bench = _module()
    doc = bench.matrix_document(8, dry_run=False)
    spec = doc["spec"]
    assert spec["matrix"]["numberGpus"] == [1, 8] and spec["repeats"] == 3
    assert spec["template"]["model"] == "llama-7b" and spec["template"]["gpuModel"]
    assert len(spec["matrix"]["experiment"]) == 4 and spec["matrix"]["distributedBackend"] == ["None", "DDP", "FSDP"]
    oom = spec["include"][0]
    assert (oom["numberGpus"], oom["batchSize"], oom["modelMaxLength"]) == (1, 128, 4096)
    from ftbench.catalog import load_catalog
    from ftbench.sweep.points import expand, parse_sweep_document

    parsed = parse_sweep_document(doc)
    assert parsed.spec is not None and not parsed.issues
    points = expand(parsed.spec, load_catalog()).points
    assert len(points) == 13 and all(p.valid for p in points)  # every GPU point passes validation


@pytest.mark.training
@pytest.mark.slow
def test_the_dry_run_writes_every_point_the_results_and_the_docs_table(tmp_path: Path) -> None:
    """The matrix of a lent machine (one GPU, as every lent machine so far) dry-run on CPU end to end; the
    N-GPU matrix's points are validated above, and DDP/FSDP on CPU ranks run in their own tests."""
    pytest.importorskip("trl")
    docs = tmp_path / "benchmarks.md"
    docs.write_text(
        "# Benchmarks\n\nbefore\n\n<!-- gpu-matrix:start -->\nold table\n<!-- gpu-matrix:end -->\n\nafter\n"
    )
    out = tmp_path / "results.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(RUN), "--dry-run", "--gpus", "1", "--home", str(tmp_path / "home"), "--out", str(out),
         "--write-docs", str(docs)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["dryRun"] is True and results["device"].startswith("CPU ranks (dry run")
    points = results["points"]
    assert len(points) == 5  # 4 experiments on one rank and the OOM point
    by_phase: dict[str, list[dict]] = {}
    for p in points:
        by_phase.setdefault(p["phase"], []).append(p)
    # GPTQ-LoRA needs pre-quantized weights, which the tiny model has not: refused with the reason
    assert {p["experiment"] for p in by_phase["Invalid"]} == {"finetune_gtpq-lora_benchmark-v1.0.0"}
    assert all("GPTQ" in p["note"] for p in by_phase["Invalid"])
    assert len(by_phase["Succeeded"]) == 4
    for p in by_phase["Succeeded"]:
        assert p["tokensPerSecond"] > 0 and p["repeats"] == 1
        low, high = p["ci95"]
        assert low < p["tokensPerSecond"] < high  # every figure with its interval
    [oom] = [p for p in points if p["note"].startswith("the deliberate OOM point")]
    assert (oom["experiment"], oom["gpus"]) == ("finetune_full_benchmark-v1.0.0", 1)
    text = docs.read_text()
    assert text.startswith("# Benchmarks\n\nbefore\n\n<!-- gpu-matrix:start -->\nMeasured ") and "old table" not in text
    assert text.endswith("<!-- gpu-matrix:end -->\n\nafter\n") and text.count("| 4 | full | 1 | None |") == 1


def test_a_lent_single_gpu_machine_runs_the_matrix_with_its_overrides() -> None:
    """The overrides that fit the matrix to a lent machine (one GPU, trl, no flash-attn, a short lease)
    reach the sweep, every point still passes validation but GPTQ-LoRA, and the table's heading names them."""
    bench = _module()
    overrides = {
        "engine": "trl",
        "gpuModel": "NVIDIA-H200",
        "attentionImplementation": "sdpa",
        "maxSteps": 10,
        "warmupSteps": 3,
    }
    doc = bench.matrix_document(1, dry_run=False, overrides={**overrides, "repeats": 2})
    spec = doc["spec"]
    assert spec["repeats"] == 2 and spec["matrix"]["numberGpus"] == [1]
    assert spec["template"].items() >= overrides.items() and spec["template"]["model"] == "llama-7b"
    from ftbench.catalog import load_catalog
    from ftbench.sweep.points import expand, parse_sweep_document

    parsed = parse_sweep_document(doc)
    assert parsed.spec is not None and not parsed.issues
    points = expand(parsed.spec, load_catalog()).points
    assert len(points) == 5  # 4 experiments on one GPU (one process: no backend) and the OOM point
    invalid = {p.wire["experiment"]: [i.message for i in p.issues] for p in points if not p.valid}
    assert set(invalid) <= {"finetune_gtpq-lora_benchmark-v1.0.0"}, invalid
    argv = [
        "--gpus",
        "1",
        "--out",
        "r.json",
        "--engine",
        "trl",
        "--home=/tmp/h",
        "--write-docs",
        "d.md",
        "--repeats",
        "2",
    ]
    assert bench._shown(argv) == " --gpus 1 --engine trl --repeats 2"
    rows = [{"point": 0, "experiment": "finetune_full_benchmark-v1.0.0", "gpus": 1, "backend": "FSDP", "phase": "Succeeded",
             "repeats": 2, "tokensPerSecond": 10.0, "ci95": [9.0, 11.0], "steadyTokensPerSecond": 12.0, "steadyCi95": None, "mfuPercent": 40.0, "gpuMemoryPeakPercent": 50.0,
             "memoryPredictionErrorPercent": -2.5, "noiseFlags": [], "note": ""}]  # fmt: skip
    table = bench.markdown(rows, "NVIDIA H200", "2026-11-26", " --gpus 1", ("Weights: random.",))
    assert "`python bench/gpu/run.py --gpus 1`" in table and "\nWeights: random.\n" in table
    assert (
        "| 0 | full | 1 | FSDP | Succeeded | 2 | 10.0 | 9.0-11.0 | 12.0 |  | 40.00 | 50.0 | -2.5 | clean |  |" in table
    )


def test_engine_fms_hf_tuning_at_a_release_reaches_every_point() -> None:
    """--engine fms-hf-tuning --fms-version V (the lent H100's run): every point asks for that release,
    GPTQ-LoRA is valid there, prompt tuning is refused for 3.2.2's known defect, and the heading names
    the release but not where the table went (--section)."""
    from ftbench.catalog import load_catalog
    from ftbench.sweep.points import expand, parse_sweep_document

    bench = _module()
    doc = bench.matrix_document(1, dry_run=False, overrides={"engine": "fms-hf-tuning", "fmsHfTuningVersion": "3.2.2"})
    parsed = parse_sweep_document(doc)
    assert parsed.spec is not None and not parsed.issues
    points = expand(parsed.spec, load_catalog()).points
    assert {p.wire["fmsHfTuningVersion"] for p in points} == {"3.2.2"}
    invalid = {p.wire["experiment"] for p in points if not p.valid}
    assert invalid == {"finetune_pt_benchmark-v1.0.0"}
    argv = ["--engine", "fms-hf-tuning", "--fms-version", "3.2.2", "--section", "gpu-matrix-h100", "--python", "/x"]
    assert bench._shown(argv) == " --engine fms-hf-tuning --fms-version 3.2.2"


@pytest.mark.parametrize(
    "store", ["gpu-h200-2026-11-26", "gpu-h100-2026-11-26/call2/fms-hf-tuning", "gpu-h100-2026-11-26/call1/trl"]
)
def test_the_docs_gpu_tables_are_the_lent_gpus_stores_tabulated(tmp_path: Path, store: str) -> None:
    """Each GPU table of docs/benchmarks.md is generated from a store a lent GPU brought back
    (bench/results/<store>, whose arguments.txt names the run's overrides and the table's section), so
    it changes only with the data or with run.py's table."""
    import shutil

    measured = ROOT / "bench" / "results" / store
    home = tmp_path / "home"
    shutil.copytree(measured, home)
    docs = tmp_path / "benchmarks.md"
    shutil.copy(ROOT / "docs" / "benchmarks.md", docs)
    args = (measured / "arguments.txt").read_text().split()
    bench = _module()
    assert (
        bench.main(
            [*args, "--tabulate", "--home", str(home), "--out", str(tmp_path / "r.json"), "--write-docs", str(docs)]
        )
        == 0
    )
    assert docs.read_text() == (ROOT / "docs" / "benchmarks.md").read_text(), (
        "docs/benchmarks.md's GPU matrix is stale: run bench/gpu/run.py --tabulate --home "
        f"{measured.relative_to(ROOT)} $(cat {measured.relative_to(ROOT)}/arguments.txt) --write-docs docs/benchmarks.md"
    )
