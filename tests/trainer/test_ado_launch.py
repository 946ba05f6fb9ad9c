"""The trainer's half of two ado interoperability points: FSDP's layer class from the model's own
`_no_split_modules` when the catalog has none, and DataParallel sampling every GPU it drives."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_plan

from ftbench.contracts.env import NodePlacement


def test_fsdp_layer_class_comes_from_no_split_modules(tmp_path: Path, tiny_model_dir: Path) -> None:
    from ftbench_trainer.launch import accelerate_config, model_layer_classes

    plan = make_plan(tmp_path, tiny_model_dir, tmp_path / "data", numberNodes=2, distributedBackend="FSDP")
    assert plan.accelerate_config is not None
    fsdp = {k: v for k, v in plan.accelerate_config["fsdp_config"].items() if k != "fsdp_transformer_layer_cls_to_wrap"}
    plan = plan.model_copy(update={"accelerate_config": {**plan.accelerate_config, "fsdp_config": fsdp}})
    place = NodePlacement(node_rank=0, num_machines=2, master_addr="127.0.0.1", master_port=29500)
    config = accelerate_config(plan, place)
    assert config["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == "LlamaDecoderLayer"
    assert model_layer_classes(str(tmp_path / "no-such-model")) is None


def test_data_parallel_sampler_reports_every_gpu() -> None:
    pytest.importorskip("psutil")
    from ftbench_trainer.measure.system import GpuSample, GpuSummary, SystemSampler

    s = SystemSampler(local_rank=0, use_gpu=False, interval=1.0, gpus=2)
    s.gpu_samples = [GpuSample(1, 10, 20, 100, 20, gpu=0), GpuSample(1, 50, 40, 300, 60, gpu=1)]
    assert s.gpu_summaries(0, 1) == [GpuSummary(10, 20, 100, 20, 20), GpuSummary(50, 40, 300, 60, 40)]
    assert s.gpu_summary(0, 1) == GpuSummary(10, 20, 100, 20, 20)
