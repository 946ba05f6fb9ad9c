"""FSDP for real on CPU ranks (trl, the main environment): the model is sharded, and what ran is read back.

Each run is `ftbench-trainer` in a subprocess under `accelerate launch` with `device: cpu` (gloo), the
path a GPU run takes with another device and backend. The assertions read what the trainer recorded
from the wrapped model and the optimizer (`status.environment.fsdp`, `results.rankMemory`), never the
spec: under FULL_SHARD each of N ranks holds ~1/N of the parameters, gradients and optimizer state;
SHARD_GRAD_OP keeps the gathered parameters from forward to backward; NO_SHARD (FSDP1) and DDP hold
everything on every rank. Tolerances: shard fractions within 5 % of 1/N (FSDP2 pads dim 0 to a
multiple of N); the 2-rank loss curve within 1e-3 relative of the 1-rank curve on the same global batch
(the sums are reduced in another order).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_plan, train

from ftbench.contracts.enums import Experiment
from ftbench.contracts.environment import RunEnvironment
from ftbench.contracts.results import Metrics, TrainerResult

pytest.importorskip("trl")
pytestmark = [pytest.mark.training, pytest.mark.slow]

PYTHON = __import__("sys").executable
SHARD_TOLERANCE = 0.05
LOSS_RTOL = 1e-3


def _train(tmp: Path, model_dir: Path, data_dir: Path, name: str, **spec: object) -> TrainerResult:
    run_dir = tmp / name
    run_dir.mkdir()
    fields: dict[str, object] = {"device": "cpu", "numberGpus": 2, "distributedBackend": "FSDP", "maxSteps": 4,
                                 **spec}  # fmt: skip
    plan = make_plan(run_dir, model_dir, data_dir, **fields)  # type: ignore[arg-type]
    return train(PYTHON, plan, run_dir, timeout=600)[0]


def _parts(result: TrainerResult) -> tuple[Metrics, RunEnvironment]:
    assert result.metrics is not None and result.environment is not None
    return result.metrics, result.environment


def _fractions(m: Metrics, attr: str, full: int) -> list[float]:
    return [getattr(r, attr) / full for r in m.rank_memory]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, TrainerResult]:
    """Every configuration once (each a real multi-process training), shared by the assertions below."""
    tmp = tmp_path_factory.mktemp("fsdp")
    data = tmp / "data"
    data.mkdir()
    train = lambda name, **spec: _train(tmp, tiny_model_dir, data, name, **spec)  # noqa: E731
    return {
        "one-rank": train("one-rank", numberGpus=1, distributedBackend=None),
        "full-2": train("full-2"),
        "full-4": train("full-4", numberGpus=4),
        "shard-grad-op": train("shard-grad-op", fsdpShardingStrategy="SHARD_GRAD_OP"),
        "no-shard-fsdp1": train(
            "no-shard-fsdp1",
            fsdpShardingStrategy="NO_SHARD",
            fsdpForwardPrefetch=True,
            fsdpBackwardPrefetch="BACKWARD_POST",
        ),
        "fsdp1-full": train("fsdp1-full", fsdpVersion=1),
        "ddp": train("ddp", distributedBackend="DDP"),
        "knobs": train(
            "knobs",
            fsdpOffloadParams=True,
            accelerateConfigMixedPrecision="bf16",
            gradientCheckpointing=True,
            fsdpStateDictType="SHARDED_STATE_DICT",
        ),
        "lora": train("lora", experiment=Experiment.LORA),
    }


@pytest.mark.parametrize(("name", "ranks"), [("full-2", 2), ("full-4", 4)])
def test_full_shard_gives_each_rank_one_nth(runs: dict[str, TrainerResult], name: str, ranks: int) -> None:
    m, env = _parts(runs[name])
    assert env.distributed_mode == "FSDP" and env.world_size == ranks and env.device == "cpu"
    fsdp = env.fsdp
    assert (
        fsdp is not None and fsdp.version == 2 and fsdp.sharding_strategy == "FULL_SHARD" and fsdp.reshard_after_forward
    )
    assert "LlamaDecoderLayer" in fsdp.wrapped_layer_classes.split(",")
    assert fsdp.sharded_parameters > 0 and not fsdp.offload_params and fsdp.param_dtype == ""
    assert len(m.rank_memory) == ranks and m.model_parameter_bytes > 0
    for attr in ("parameter_bytes", "gradient_bytes"):
        for f in _fractions(m, attr, m.model_parameter_bytes):
            assert f == pytest.approx(1 / ranks, rel=SHARD_TOLERANCE), (
                attr,
                _fractions(m, attr, m.model_parameter_bytes),
            )
    # AdamW keeps two moments per parameter element (plus a scalar step): ~2/N of the parameter bytes.
    for f in _fractions(m, "optimizer_state_bytes", m.model_parameter_bytes):
        assert f == pytest.approx(2 / ranks, rel=SHARD_TOLERANCE)


def test_shard_grad_op_keeps_parameters_between_forward_and_backward(runs: dict[str, TrainerResult]) -> None:
    m, env = _parts(runs["shard-grad-op"])
    assert env.fsdp is not None and env.fsdp.version == 2
    assert env.fsdp.sharding_strategy == "SHARD_GRAD_OP" and not env.fsdp.reshard_after_forward
    # At rest (between steps) the parameters are still sharded: the difference is inside the step.
    for f in _fractions(m, "parameter_bytes", m.model_parameter_bytes):
        assert f == pytest.approx(0.5, rel=SHARD_TOLERANCE)


def test_no_shard_and_ddp_hold_everything_on_every_rank(runs: dict[str, TrainerResult]) -> None:
    m, env = _parts(runs["no-shard-fsdp1"])
    fsdp = env.fsdp
    assert fsdp is not None and fsdp.version == 1 and fsdp.sharding_strategy == "NO_SHARD"
    assert fsdp.forward_prefetch and fsdp.backward_prefetch == "BACKWARD_POST"
    for attr in ("parameter_bytes", "gradient_bytes"):
        assert all(f == pytest.approx(1.0, rel=SHARD_TOLERANCE) for f in _fractions(m, attr, m.model_parameter_bytes))
    ddp_m, ddp_env = _parts(runs["ddp"])
    assert ddp_env.fsdp is None and ddp_env.distributed_mode == "MULTI_CPU"
    assert all(f == pytest.approx(1.0) for f in _fractions(ddp_m, "parameter_bytes", ddp_m.model_parameter_bytes))
    assert ddp_m.model_parameter_bytes == m.model_parameter_bytes


def test_fsdp1_full_shard_on_cpu(runs: dict[str, TrainerResult]) -> None:
    m, env = _parts(runs["fsdp1-full"])
    fsdp = env.fsdp
    assert fsdp is not None and fsdp.version == 1 and fsdp.sharding_strategy == "FULL_SHARD"
    assert fsdp.backward_prefetch == "BACKWARD_PRE" and "LlamaDecoderLayer" in fsdp.wrapped_layer_classes
    for f in _fractions(m, "parameter_bytes", m.model_parameter_bytes):
        assert f == pytest.approx(0.5, rel=SHARD_TOLERANCE)


def test_each_knob_is_in_effect(runs: dict[str, TrainerResult]) -> None:
    """Offload (without pinned memory on CPU), bf16 mixed precision, activation checkpointing and the
    state dict type, each read back from the wrapped model, its layers and accelerate's plugin."""
    m, env = _parts(runs["knobs"])
    fsdp = env.fsdp
    assert fsdp is not None and fsdp.version == 2
    assert fsdp.offload_params and not fsdp.offload_pin_memory
    assert fsdp.param_dtype == "bfloat16" and fsdp.state_dict_type == "SHARDED_STATE_DICT"
    assert env.activation_checkpointing
    _, plain = _parts(runs["full-2"])
    assert not plain.activation_checkpointing
    assert plain.fsdp is not None and plain.fsdp.state_dict_type == "FULL_STATE_DICT"
    assert m.train_steps == 4


def test_two_ranks_follow_the_one_rank_loss_curve(runs: dict[str, TrainerResult]) -> None:
    """Same global batch (4): one rank with 4 rows per step, or two FSDP ranks with 2 each."""
    one, _ = _parts(runs["one-rank"])
    for name in ("full-2", "ddp"):
        two, _ = _parts(runs[name])
        assert len(two.loss_curve) == len(one.loss_curve) == 4
        assert two.loss_curve == pytest.approx(one.loss_curve, rel=LOSS_RTOL), (name, two.loss_curve, one.loss_curve)


def test_lora_under_fsdp_shards_the_adapter_and_its_optimizer_state(runs: dict[str, TrainerResult]) -> None:
    m, env = _parts(runs["lora"])
    assert env.fsdp is not None and env.fsdp.version == 2 and env.distributed_mode == "FSDP"
    trainable_bytes = m.trainable_parameters * 4  # float32
    for r in m.rank_memory:
        assert r.parameter_bytes / m.model_parameter_bytes == pytest.approx(0.5, rel=SHARD_TOLERANCE)
        assert r.gradient_bytes / trainable_bytes == pytest.approx(0.5, rel=SHARD_TOLERANCE)
        assert r.optimizer_state_bytes / trainable_bytes == pytest.approx(1.0, rel=SHARD_TOLERANCE)


def test_every_run_checks_its_memory_prediction(runs: dict[str, TrainerResult]) -> None:
    """Each run's plan is predicted after training, at the batch shape its first step trained, and
    compared with the tensor peak its ranks counted in that step: within 5 % for one rank, FSDP2 on 2
    and 4 ranks, SHARD_GRAD_OP, NO_SHARD, FSDP1, DDP, offload with bf16 and checkpointing, and LoRA."""
    for name, result in runs.items():
        m, _ = _parts(result)
        assert m.cpu_tensor_peak_bytes > 0 and m.predicted_peak_bytes and m.peak_batch_shape, name
        assert m.prediction_error_percent is not None and abs(m.prediction_error_percent) <= 5.0, (name, m)
