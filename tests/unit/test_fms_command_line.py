"""The per-release fms-hf-tuning command line, without any release installed (the parse against each
release's own parser is tests/unit/test_render_fms_args.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.cli import main
from ftbench.contracts.plan import LaunchPlan
from ftbench.engines.fms_args import UnsupportedByRelease, equivalent_command, sft_trainer_args
from ftbench.render.manifests import render_experiment

REPO = Path(__file__).resolve().parents[2]


def plan(**spec: Any) -> LaunchPlan:
    fields = {"model": "llama3.1-8b", "modelMaxLength": 512, "numberGpus": 1, "gpuModel": "G", "batchSize": 2}
    parsed = FineTuneExperimentSpec.model_validate({**fields, **spec})
    return render_experiment(parsed, load_catalog(), ClusterProfile(), name="x", namespace="n").plan


def flags(p: LaunchPlan) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    key = ""
    for arg in sft_trainer_args(p, dataset_path="/d.jsonl"):
        if arg.startswith("--"):
            key = arg
            out[key] = []
        else:
            out[key].append(arg)
    return out


def test_fast_moe_only_when_asked() -> None:
    assert "--fast_moe" not in flags(plan(fmsHfTuningVersion="3.2.2"))  # `--fast_moe 0` would switch ScatterMoE on


def test_prompt_tuning_keeps_optim_bf16_and_checkpointing_kwargs() -> None:
    got = flags(plan(experiment="finetune_pt_benchmark-v1.0.0", optim="sgd", bf16=True))
    assert got["--optim"] == ["sgd"] and got["--bf16"] == ["True"]
    assert got["--gradient_checkpointing_kwargs"] == ['{"use_reentrant": false}']


def test_gptq_lora_honours_the_users_fast_kernels() -> None:
    gptq = {
        "experiment": "finetune_gtpq-lora_benchmark-v1.0.0",
        "model": "mistral-7b-v0.1",
        "fmsHfTuningVersion": "2.8.2",
    }
    assert flags(plan(**gptq))["--fast_kernels"] == ["true", "true", "true"]  # the experiment's default
    assert flags(plan(**gptq, fastKernels=[False, True, True]))["--fast_kernels"] == ["false", "true", "true"]


def test_a_flag_the_release_lacks_is_refused_not_passed() -> None:
    p = plan(fmsHfTuningVersion="2.1.2")
    p = p.model_copy(update={"training": p.training.model_copy(update={"dataset_image_field": "images"})})
    with pytest.raises(UnsupportedByRelease, match=r"fms-hf-tuning 2\.1\.2 has no --dataset_image_field"):
        sft_trainer_args(p, dataset_path="/d.jsonl")


def test_equivalent_command_is_shell_quoted() -> None:
    p = plan()
    command = equivalent_command(p, sft_trainer_args(p, dataset_path="/d.jsonl"), None)
    assert command.startswith("python -m tuning.sft_trainer --model_name_or_path ")
    assert "--response_template '\n### Response:'" in command


def test_render_command_prints_the_bare_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--command", str(REPO / "examples" / "gptq-lora.yaml")]) == 0
    out = capsys.readouterr().out
    assert "cat > accelerate-config.yaml <<'EOF'" in out
    assert "accelerate launch --config_file accelerate-config.yaml -m tuning.sft_trainer " in out
    assert main(["render", "--command", str(REPO / "examples" / "quickstart.yaml")]) == 2
    assert "engine trl has no bare command line" in capsys.readouterr().err
