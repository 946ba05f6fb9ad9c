"""Peer conformance with the published ado-sfttrainer 1.8.12, using ado's own data and code.

(a) every model of ado's config/models.yaml resolves in ftbench to the same weights (seed 002's
layout under the cluster profile's modelRoot) and LoRA targets as ado's experiment modules;
(b) a dataset made by ado's generate_dataset.py trains under `ftbench run`, and ftbench's
generated rows pass ado's token counting (calculate_tokens_in_text_dataset);
(c) a vision dataset made by ado's generate_vision_dataset.py is the file ftbench uses, and
ftbench's generated vision rows have its schema and image format (JPEG).
"""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.cli import main
from ftbench.contracts.enums import Experiment, Runtime
from ftbench.contracts.plan import ExperimentRef
from ftbench.contracts.results import Outcome, TrainerResult
from ftbench.render.plan import build_plan

pytestmark = pytest.mark.peer
ADO_MODEL_ROOT = "/hf-models-pvc"


def gen(dataset_id: str) -> Any:
    """The catalog's generator of a dataset, as a plan carries it."""
    from ftbench.catalog import load_catalog

    return load_catalog().datasets[dataset_id].generator()


def _ado_targets(ado_dir: Path, module: str) -> dict[str, list[str]]:
    """`default_target_modules` of one of ado's experiment modules (read, not imported: the
    modules import ado-core)."""
    tree = ast.parse((ado_dir / "experiments" / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "default_target_modules":
            return ast.literal_eval(node.value)
    raise AssertionError(f"no default_target_modules in {module}.py")


def _plan_ref(model: str, experiment: Experiment) -> str:
    spec = FineTuneExperimentSpec.model_validate(
        {"experiment": experiment, "model": model, "modelMaxLength": 512, "numberGpus": 1, "batchSize": 1,
         "gpuModel": "G"}
    )  # fmt: skip
    plan = build_plan(spec, load_catalog(), ClusterProfile(), ref=ExperimentRef(name="x"), runtime=Runtime.JOB)
    return plan.model.ref


def test_every_ado_model_resolves_to_the_same_weights(ado_dir: Path) -> None:
    models = yaml.safe_load((ado_dir / "config" / "models.yaml").read_text())
    catalog = load_catalog()
    assert ClusterProfile().storage.model_root == ADO_MODEL_ROOT
    for name, variants in models.items():
        assert name in catalog.models, f"ado model {name} is missing from the catalog"
        for key, experiment in (("Vanilla", Experiment.FULL), ("GPTQ-Quantized", Experiment.GPTQ_LORA)):
            if key in variants:
                assert _plan_ref(name, experiment) == variants[key].rstrip("/"), (name, key)


@pytest.mark.parametrize(("module", "weights"), [("lora", "vanilla"), ("gptq_lora", "gptq")])
def test_lora_targets_match_ados_experiments(ado_dir: Path, module: str, weights: str) -> None:
    catalog = load_catalog()
    for name, targets in _ado_targets(ado_dir, module).items():
        model = catalog.models[name]
        if model.weights_for(weights) is None:  # ado lists targets for allam-1-13b GPTQ without weights
            continue
        assert list(model.target_modules or ()) == targets, name


def _ado_finetune(ado_dir: Path) -> ModuleType:
    """ado's wrapper module, loaded by path (its package __init__ imports ado-core and Ray)."""
    spec = importlib.util.spec_from_file_location("ado_finetune", ado_dir / "wrapper_fms_hf_tuning" / "finetune.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.training
def test_ados_generated_dataset_trains_in_ftbench(
    ado_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("trl")
    home = tmp_path / "home"
    monkeypatch.setenv("FTBENCH_HOME", str(home))
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    dataset = home / "data" / "news-tokens-16384plus-entries-4096.jsonl"
    python = ado_dir.parents[4] / "bin" / "python"
    subprocess.run(
        [str(python), str(ado_dir / "scripts" / "generate_dataset.py"), "-o", str(dataset), "--tokens-output", "300",
         "--num-max-gpus", "1", "--num-max-batch-size", "8", "--num-gradient-accumulation-steps", "1"],
        check=True, capture_output=True,
    )  # fmt: skip
    assert len(dataset.read_text().splitlines()) == 8
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "apiVersion: ftbench.io/v1alpha1\nkind: FineTuneExperiment\nmetadata: {name: ado-data}\nspec:\n"
        "  experiment: finetune_lora_benchmark-v1.0.0\n  engine: trl\n  model: ftbench-tiny-llama\n"
        "  datasetId: news-tokens-16384plus-entries-4096\n  modelMaxLength: 256\n  numberGpus: 0\n"
        "  batchSize: 2\n  gradientAccumulationSteps: 1\n  maxSteps: 2\n"
    )
    assert main(["run", str(exp), "-o", "json"]) == 0
    result = TrainerResult.model_validate(json.loads(capsys.readouterr().out))
    assert result.outcome == Outcome.SUCCEEDED and result.metrics is not None and result.metrics.train_steps == 2
    assert result.environment is not None
    assert (result.environment.dataset_file, result.environment.dataset_generated) == (str(dataset), False)
    assert sorted(p.name for p in dataset.parent.iterdir()) == [dataset.name]  # nothing generated beside it


@pytest.mark.parametrize("dataset_id", ["news-chars-512-entries-4096", "news-tokens-16384plus-entries-4096"])
def test_ftbench_rows_pass_ados_token_counting(ado_dir: Path, tmp_path: Path, dataset_id: str) -> None:
    pytest.importorskip("transformers")
    from ftbench_trainer.datasets import generate_dataset
    from ftbench_trainer.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model")
    path = generate_dataset(dataset_id, gen(dataset_id), tmp_path / "data", entries=3)
    counts = _ado_finetune(ado_dir).calculate_tokens_in_text_dataset(str(model), str(path))
    assert len(counts) == 3
    if "tokens" in dataset_id:
        assert min(counts) >= 16384  # the seed's "16384plus", counted as ado counts (with BOS)
    else:
        assert all(c > 0 for c in counts)
    print(dataset_id, counts, file=sys.stderr)


@pytest.mark.parametrize(("width", "height"), [(384, 384), (384, 768)])
def test_ados_vision_dataset_is_read_like_ftbenchs(ado_dir: Path, tmp_path: Path, width: int, height: int) -> None:
    """A file from ado's generate_vision_dataset.py at seed 002's place is the one ftbench trains on,
    and ftbench's generated rows have its schema and image format (one JPEG of the catalog's size)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    image_module = pytest.importorskip("PIL.Image")
    hf_datasets = pytest.importorskip("datasets")
    from ftbench_trainer.datasets import generate_dataset, resolve_dataset_file
    from ftbench_trainer.measure.dataset_tokens import read_texts

    dataset_id = f"vision-{width}x{height}-16384plus-entries-4096"
    assert (gen(dataset_id).params()["width"], gen(dataset_id).params()["height"]) == (width, height)
    data = tmp_path / "data"
    ado_file = data / f"{dataset_id}.parquet"
    python = ado_dir.parents[4] / "bin" / "python"
    subprocess.run(
        [str(python), str(ado_dir / "scripts" / "generate_vision_dataset.py"), "-o", str(ado_file),
         "--tokens-input", "10", "--tokens-output", "20", "--num-max-gpus", "1", "--num-max-batch-size", "2",
         "--num-gradient-accumulation-steps", "1", "--image-width", str(width), "--image-height", str(height)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert resolve_dataset_file(dataset_id, gen(dataset_id), data) == (ado_file, False)
    assert sorted(p.name for p in data.iterdir()) == [ado_file.name]  # nothing generated beside it
    ours = generate_dataset(dataset_id, gen(dataset_id), tmp_path / "ours", entries=2, min_tokens=20)

    ado_table, our_table = pq.read_table(ado_file), pq.read_table(ours)
    assert ado_table.column_names == our_table.column_names == ["images", "output"]
    assert ado_table.schema.field("output").type == our_table.schema.field("output").type
    # ado's all-None `path` is pandas' null type; ftbench's is the string HF's Image feature declares.
    ado_schema, our_schema = ado_table.schema.remove_metadata(), our_table.schema.remove_metadata()
    assert ado_schema.field("images").type.field("path").type == pa.null()
    assert pa.unify_schemas([ado_schema, our_schema]) == our_schema
    for table in (ado_table, our_table):
        for i, row in enumerate(table.to_pylist()):
            image = image_module.open(io.BytesIO(row["images"]["bytes"]))
            assert (image.format, image.size, image.mode) == ("JPEG", (width, height), "RGB")
            user, assistant = row["output"]
            assert [(c["type"], c["index"]) for c in user["content"]] == [("text", None), ("image", i)]
            assert (user["role"], assistant["role"]) == ("user", "assistant")

    # Both load as the trainer and fms-hf-tuning load parquet; under HF's Image feature both decode alike.
    for path in (ado_file, ours):
        loaded = hf_datasets.load_dataset(
            "parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf")
        )
        decoded = loaded.cast_column("images", hf_datasets.Image())[0]["images"]
        assert (decoded.format, decoded.size) == ("JPEG", (width, height))
        # Seed note 3 counts text rows; chat rows are refused (the run reports 0 with a warning), not guessed.
        with pytest.raises(TypeError, match="not text"):
            list(read_texts(path, "output"))
