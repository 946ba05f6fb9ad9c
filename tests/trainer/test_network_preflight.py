"""run.requireRoce in the trainer: two gloo ranks run the network preflight, find TCP instead of RoCE and
end the run NetworkUnfit (exit 43, reason RoceNotInEffect) before any model is loaded, the figures kept."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import current_python, read_result, run_trainer, tail, two_processes_one_node, write_plan

from ftbench.contracts.network import NetworkTransport
from ftbench.contracts.results import EXIT_NETWORK_UNFIT, REASON_NETWORK_CHECKED, Outcome, TrainerResult
from ftbench.engines.envs import package_path
from ftbench.host.ports import free_port


def test_require_roce_refuses_before_training(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("accelerate")
    missing_model = tmp_path / "no-model"  # never read: the run ends before the model is resolved
    plan = two_processes_one_node(tmp_path, missing_model, tmp_path / "data", run={"networkPreflight": "on"})
    assert plan.network_preflight is not None
    # The spec allows requireRoce only on multi-node enableRoce runs; the trainer's check is the same on one node.
    plan = plan.model_copy(
        update={"network_preflight": plan.network_preflight.model_copy(update={"require_roce": True})}
    )
    proc = run_trainer(current_python(), write_plan(plan, tmp_path), timeout=240)
    assert proc.returncode == EXIT_NETWORK_UNFIT, tail(proc)
    result = read_result(plan)
    assert (result.outcome, result.reason, result.is_valid) == (Outcome.NETWORK_UNFIT, "RoceNotInEffect", False)
    assert result.metrics is None and result.error is not None and "run.requireRoce" in result.error.message
    assert result.environment is not None and result.environment.network is not None
    network = result.environment.network
    assert network.transport == NetworkTransport.TCP and network.ranks == 2 and network.peak_bus_bandwidth_gbps > 0
    message = Path(plan.output.termination_message_path).read_text()
    assert TrainerResult.from_json(message).outcome == Outcome.NETWORK_UNFIT
    assert not missing_model.exists()


def test_a_network_check_runs_only_the_preflight(tmp_path: Path) -> None:
    """run.networkPreflight only: two gloo ranks measure the collectives and the run succeeds with the
    figures and no metrics, without resolving a model (it does not exist) or training."""
    pytest.importorskip("torch")
    pytest.importorskip("accelerate")
    missing_model = tmp_path / "no-model"
    plan = two_processes_one_node(tmp_path, missing_model, tmp_path / "data", run={"networkPreflight": "only"})
    assert plan.network_preflight is not None and plan.network_preflight.only
    proc = run_trainer(current_python(), write_plan(plan, tmp_path), timeout=240)
    assert proc.returncode == 0, tail(proc)
    result = read_result(plan)
    assert (result.outcome, result.reason, result.is_valid) == (Outcome.SUCCEEDED, REASON_NETWORK_CHECKED, True)
    assert result.metrics is None and result.error is None
    env = result.environment
    assert env is not None and env.network is not None and env.world_size == 2
    assert env.network.transport == NetworkTransport.TCP and env.network.peak_bus_bandwidth_gbps > 0
    assert not missing_model.exists()


SCRIPT = """
import os, sys
from pathlib import Path
import torch.distributed as dist
from ftbench_trainer.network.preflight import read_nccl_logs

logs, out = Path(sys.argv[1]), Path(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()
fixture = ["roce-gdr.log", "roce-not-found.log"][rank]  # rank 1's node found no RDMA device
(logs / f"nccl-{os.getpid()}.log").write_text((Path(sys.argv[3]) / fixture).read_text())
net = read_nccl_logs(logs)
(out / f"rank-{rank}.txt").write_text(f"{net.transport.value} {net.fallback}")
dist.destroy_process_group()
"""


def test_every_ranks_nccl_log_is_read_together(tmp_path: Path) -> None:
    """Each rank's own NCCL file (NCCL_DEBUG_FILE with %p), gathered: one rank on sockets decides for all."""
    pytest.importorskip("torch")
    script = tmp_path / "read_logs.py"
    script.write_text(SCRIPT)
    fixtures = Path(__file__).resolve().parents[1] / "unit" / "nccl_logs"
    env = {**os.environ, "PYTHONPATH": package_path(), "NCCL_DEBUG_FILE": str(tmp_path / "nccl-%p.log")}
    cmd = [current_python(), "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())]
    proc = subprocess.run(
        [*cmd, str(script), str(tmp_path), str(tmp_path), str(fixtures)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, tail(proc)
    for rank in (0, 1):
        assert (tmp_path / f"rank-{rank}.txt").read_text() == "socket NET/IB : No device found."
    assert "Using network Socket" in proc.stdout and "Using network IB" in proc.stdout  # echoed to the log
