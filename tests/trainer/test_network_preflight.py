"""run.requireRoce in the trainer: two gloo ranks run the network preflight, find TCP instead of RoCE and
end the run NetworkUnfit (exit 43, reason RoceNotInEffect) before any model is loaded, the figures kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import current_python, read_result, run_trainer, tail, two_processes_one_node, write_plan

from ftbench.contracts.results import EXIT_NETWORK_UNFIT, NetworkTransport, Outcome, TrainerResult


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
