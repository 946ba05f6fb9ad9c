"""`ftbench predict`: real architectures predicted on this CPU-only machine from their config.json alone.

A 7B Llama config (LLaMA-7B's published shapes, no weights) stands in for the model through a
model map, as a cluster's models volume would hold it. Full fine-tuning a 7B model in float16 on
one 80 GB A100 is 5 model sizes at the optimizer step and fits; 13B does not, and FSDP
FULL_SHARD over 4 GPUs brings it back under the capacity. The tiny model of the quickstart is
predicted on CPU (no GPU verdict).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ftbench.cli import main

pytest.importorskip("torch")
pytest.importorskip("peft")
REPO = Path(__file__).resolve().parents[2]
GIB = 2**30


def llama_config(path: Path, *, hidden: int, inter: int, layers: int, heads: int) -> Path:
    from transformers import LlamaConfig

    LlamaConfig(
        hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
        vocab_size=32000, max_position_embeddings=2048, architectures=["LlamaForCausalLM"],
    ).save_pretrained(path)  # fmt: skip
    return path


def spec_file(tmp_path: Path, name: str, **spec: object) -> Path:
    doc = {
        "apiVersion": "ftbench.io/v1alpha1",
        "kind": "FineTuneExperiment",
        "metadata": {"name": name},
        "spec": {
            "experiment": "finetune_full_benchmark-v1.0.0", "engine": "trl", "model": "llama-7b",
            "modelMaxLength": 1024, "numberGpus": 1, "gpuModel": "NVIDIA-A100-SXM4-80GB", "batchSize": 1,
            "torchDtype": "float16", "gradientCheckpointing": True, **spec,
        },
    }  # fmt: skip
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def predict(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main([*args, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def model_map(tmp_path: Path) -> Path:
    configs = {
        "llama-7b": llama_config(tmp_path / "7b", hidden=4096, inter=11008, layers=32, heads=32),
        "llama-13b": llama_config(tmp_path / "13b", hidden=5120, inter=13824, layers=40, heads=40),
    }
    path = tmp_path / "model-map.yaml"
    path.write_text(yaml.safe_dump({name: {"Vanilla": str(p)} for name, p in configs.items()}))
    return path


def test_full_fine_tuning_fits_at_7b_and_not_at_13b_until_sharded(home, tmp_path, model_map, capsys):
    seven = predict(capsys, "predict", str(spec_file(tmp_path, "full-7b")), "--model-map", str(model_map))
    p = seven["prediction"]
    assert p["tracedParameters"] == 6_738_415_616 and p["device"] == "cuda" and p["phase"] == "optimizer"
    # float16 parameters, gradients, two AdamW moments and foreach's temporary: 5 model sizes.
    assert p["peakBytes"] == pytest.approx(5 * 2 * 6_738_415_616, rel=0.01)
    assert seven["fit"]["fits"] is True and seven["fit"]["predictedTotalBytes"] > p["peakBytes"]

    thirteen = predict(capsys, "predict", str(spec_file(tmp_path, "full-13b", model="llama-13b")),
                       "--model-map", str(model_map))  # fmt: skip
    assert thirteen["fit"]["fits"] is False and thirteen["fit"]["headroomBytes"] < 0

    sharded = spec_file(
        tmp_path, "full-13b-fsdp", model="llama-13b", numberGpus=4, batchSize=4, distributedBackend="FSDP",
        fsdpShardingStrategy="FULL_SHARD",
    )  # fmt: skip
    four = predict(capsys, "predict", str(sharded), "--model-map", str(model_map))
    assert four["prediction"]["sharding"] == "FULL_SHARD" and four["prediction"]["worldSize"] == 4
    assert four["fit"]["fits"] is True
    # Under accumulation (gradientAccumulationSteps 4) accelerate's no_sync leaves every FSDP2 rank the whole
    # unsharded gradient until the last micro-step (bench/fsdp_accumulation.py), so 4 ranks hold more than a
    # quarter of the single-GPU peak; without accumulation they hold less than a third of it.
    assert four["prediction"]["peakBytes"] < thirteen["prediction"]["peakBytes"] / 2
    single = spec_file(
        tmp_path, "full-13b-fsdp-ga1", model="llama-13b", numberGpus=4, batchSize=4, distributedBackend="FSDP",
        fsdpShardingStrategy="FULL_SHARD", gradientAccumulationSteps=1,
    )  # fmt: skip
    one = predict(capsys, "predict", str(single), "--model-map", str(model_map))
    assert one["prediction"]["peakBytes"] < thirteen["prediction"]["peakBytes"] / 3
    # More than half the float16 gradient (its shard alone is a quarter of it).
    assert four["prediction"]["peakBytes"] - one["prediction"]["peakBytes"] > 0.5 * 2 * 13e9
    # The prediction says how much of the peak is that unsharded gradient, and the verdict leaves it out as under
    # FSDP1 (issue 60.6): the device-level tensors term is the peak without it.
    assert four["prediction"]["unshardedGradientsInPeak"] is True
    assert not one["prediction"].get("unshardedGradientsInPeak")
    held = four["prediction"]["unshardedGradientBytes"]
    assert held > 0.5 * 2 * 13e9
    tensors = next(t["bytes"] for t in four["fit"]["device"]["terms"] if t["name"] == "tensors")
    assert tensors == four["prediction"]["peakBytes"] - held
    # How sure: the out-of-sample band of ado's fleet rows like this run (several GPUs on one node), widened and
    # said: engine trl is not what the fleet ran.
    accuracy = four["fit"]["fleetAccuracy"]
    assert (accuracy["group"], accuracy["validation"]) == ("several GPUs on one node", "leave one model out, widened")
    assert main(["predict", str(sharded), "--model-map", str(model_map)]) == 0
    out = capsys.readouterr().out
    assert "how sure (ado's fleet)" in out and "note: outside the calibration: engine trl" in out


def test_lora_needs_a_fraction_of_full_fine_tuning(home, tmp_path, model_map, capsys):
    lora = spec_file(tmp_path, "lora-7b", experiment="finetune_lora_benchmark-v1.0.0")
    out = predict(capsys, "predict", str(lora), "--model-map", str(model_map))
    p = out["prediction"]
    assert p["trainableParameters"] < p["tracedParameters"] / 100
    assert p["split"]["parametersBytes"] == pytest.approx(2 * p["tracedParameters"], rel=0.01)
    assert p["peakBytes"] < 20 * GIB and out["fit"]["fits"] is True


def test_the_quickstart_is_predicted_on_cpu(home, capsys):
    out = predict(capsys, "predict", str(REPO / "examples" / "quickstart.yaml"))
    assert out["prediction"]["device"] == "cpu" and "fit" not in out
    assert main(["predict", str(REPO / "examples" / "quickstart.yaml")]) == 0
    assert "peak per device" in capsys.readouterr().out


def test_a_model_without_a_config_is_refused_with_the_reason(home, tmp_path, capsys):
    """allam-1-13b has no architecture in the catalog: without its config.json there is nothing to trace."""
    missing = tmp_path / "map.yaml"
    missing.write_text(yaml.safe_dump({"allam-1-13b": {"Vanilla": str(tmp_path / "nowhere")}}))
    spec = spec_file(tmp_path, "nocfg", model="allam-1-13b")
    assert main(["predict", str(spec), "--model-map", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "cannot read the config of model allam-1-13b" in err and "config.json only (no weights)" in err


def test_a_catalog_model_is_predicted_from_its_catalog_architecture(home, tmp_path, capsys):
    """llama-13b's weights are nowhere on this machine: the catalog's architecture is traced instead."""
    missing = tmp_path / "map.yaml"
    missing.write_text(yaml.safe_dump({"llama-13b": {"Vanilla": str(tmp_path / "nowhere")}}))
    out = predict(capsys, "predict", str(spec_file(tmp_path, "cat", model="llama-13b")), "--model-map", str(missing))
    assert "architecture: the catalog's (no config.json here)" in out["prediction"]["notes"]
    assert out["prediction"]["tracedParameters"] == 13_015_864_320


def test_gptq_lora_and_prompt_tuning_are_predicted_in_their_engines_environment(home, tmp_path, model_map, capsys):
    """GPTQ-LoRA runs on fms-hf-tuning: its predictor runs in that release's environment (transformers 4.x)."""
    mapped = yaml.safe_load(model_map.read_text())
    mapped["llama-7b"]["GPTQ-Quantized"] = mapped["llama-7b"]["Vanilla"]
    model_map.write_text(yaml.safe_dump(mapped))
    gptq = spec_file(
        tmp_path, "gptq", experiment="finetune_gtpq-lora_benchmark-v1.0.0", engine="fms-hf-tuning",
        fmsHfTuningVersion="2.8.2", numberGpus=2, batchSize=4, modelMaxLength=4096, torchDtype="float16",
    )  # fmt: skip
    out = predict(capsys, "predict", str(gptq), "--model-map", str(model_map))
    p = out["prediction"]
    assert any("GPTQ base weights counted as 4-bit" in n for n in p["notes"])
    # 4-bit weights, sharded over 2 ranks, plus FSDP1's root unit (float16 embeddings and LM head, 0.5 GB)
    # kept gathered: far below the 6.7 GB a float16 half would hold.
    assert p["split"]["parametersBytes"] < 3 * GIB and out["fit"]["fits"] is True
    pt = spec_file(tmp_path, "pt", experiment="finetune_pt_benchmark-v1.0.0")
    out = predict(capsys, "predict", str(pt), "--model-map", str(model_map))
    assert out["prediction"]["trainableParameters"] == 8 * 4096  # 8 virtual tokens of the hidden size


def test_min_gpus_finds_the_fewest_gpus_and_the_largest_batch(home, tmp_path, model_map, capsys):
    """ado autoconf's question: 13B full fine-tuning in float16 at batch 8 does not fit one 80 GB GPU (five model
    sizes, 130 GB) and fits once FSDP shards it over 2 or more; the throughput and run time come with it."""
    spec = spec_file(tmp_path, "shapes", model="llama-13b", numberGpus=8, batchSize=8, distributedBackend="FSDP",
                     maxSteps=10)  # fmt: skip
    out = predict(capsys, "predict", str(spec), "--model-map", str(model_map), "--min-gpus")
    shapes = out["shapes"]
    assert shapes["fewestGpus"] in (2, 4) and shapes["fewestGpusNodes"] == 1
    assert shapes["largestBatchSize"] >= 8 and shapes["shapesTried"] >= 5
    assert out["throughput"]["tokensPerSecondEstimate"] > 0 and out["runTime"]["boundedBy"] == "maxSteps"
    assert out["runTime"]["stepsEstimate"] == 10


def test_a_sweep_is_predicted_point_by_point_and_filled_with_the_fewest_gpus(home, tmp_path, model_map, capsys):
    """`ftbench predict SWEEP --fill-gpus OUT`: each point's verdict, tokens/s and fewest GPUs, and a sweep whose
    points run on those counts (13B full fine-tuning needs sharding where 7B does not), valid as written."""
    experiment = yaml.safe_load(spec_file(tmp_path, "unused", batchSize=4, maxSteps=10).read_text())
    sweep = {"apiVersion": "ftbench.io/v1alpha1", "kind": "FineTuneSweep", "metadata": {"name": "fill"},
             "spec": {"template": experiment["spec"], "matrix": {"model": ["llama-7b", "llama-13b"]}}}  # fmt: skip
    path, out_path = tmp_path / "sweep.yaml", tmp_path / "filled.yaml"
    path.write_text(yaml.safe_dump(sweep))
    out = predict(capsys, "predict", str(path), "--model-map", str(model_map), "--fill-gpus", str(out_path))
    seven, thirteen = out["points"]
    assert thirteen["fits"] is False and thirteen["fewestGpus"] >= 2 and thirteen["shapesTried"] == 3
    assert seven["fewestGpus"] is not None and seven["fewestGpus"] < thirteen["fewestGpus"]
    assert seven["tokensPerSecondEstimate"] > thirteen["tokensPerSecondEstimate"] > 0
    assert "left out" in out["cost"]  # the 13B point at 1 GPU is predicted not to fit: not priced
    filled = yaml.safe_load(out_path.read_text())
    assert "matrix" not in filled["spec"] and filled["spec"]["template"] == experiment["spec"]
    assert [(e["model"], e["numberGpus"]) for e in filled["spec"]["include"]] == [
        ("llama-7b", seven["fewestGpus"]), ("llama-13b", thirteen["fewestGpus"])]  # fmt: skip
    assert main(["validate", str(out_path), "--model-map", str(model_map)]) == 0


def test_the_rows_that_train_are_counted_with_the_models_own_tokenizer(home, tmp_path, capsys):
    """Issue 45.2 for a model whose tokenizer ftbench does not build: the predictor tokenizes the dataset's prompts
    with the tokenizer beside the model's config.json (here llama3.2-1b mapped to a folder holding the tiny
    model's, whose counts the catalog's generated table has), and states the rows that train at the spec's length,
    or the refusal the operator gives before creating anything."""
    from ftbench.catalog import load_catalog
    from ftbench_trainer.tiny_model import build_tiny_model

    folder = build_tiny_model(tmp_path / "tokenizer-model")
    capsys.readouterr()  # what building it printed
    model_map = tmp_path / "model-map.yaml"
    model_map.write_text(yaml.safe_dump({"llama3.2-1b": {"Vanilla": str(folder)}}))
    dataset = "news-chars-512-entries-4096"
    lengths = load_catalog().prompt_lengths("ftbench-tiny-llama", dataset) or {}
    fields = {"model": "llama3.2-1b", "numberGpus": 0, "gpuModel": None, "torchDtype": "float32",
              "experiment": "finetune_lora_benchmark-v1.0.0", "datasetId": dataset}  # fmt: skip
    spec = spec_file(tmp_path, "rows", modelMaxLength=256, batchSize=4, **fields)
    out = predict(capsys, "predict", str(spec), "--model-map", str(model_map))
    assert out["rowsOffered"] == 4096 and out["rowsTrained"] == sum(n for t, n in lengths.items() if t < 256)
    assert "promptTokens" not in out["prediction"]  # the counts, not the histogram, go into status
    short = spec_file(tmp_path, "short", modelMaxLength=min(lengths), batchSize=4, **fields)
    out = predict(capsys, "predict", str(short), "--model-map", str(model_map))
    assert out["rowsTrained"] == 0 and "REFUSED" in out["data"] and "use modelMaxLength" in out["data"]
