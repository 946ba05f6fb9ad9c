"""What the network preflight's figures mean in status: condition NetworkAsExpected from results derived
from the NCCL fixtures (tests/unit/nccl_logs), and run.requireRoce's Invalid outcome as the operator reads it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ftbench.api.network import NetworkExpectation, network_verdict
from ftbench.api.status import FineTuneExperimentStatus, Phase
from ftbench.contracts.conditions import ConditionType
from ftbench.contracts.environment import RunEnvironment
from ftbench.contracts.network import BandwidthSample, Collective, NetworkInEffect
from ftbench.contracts.outcomes import OUTCOMES
from ftbench.contracts.results import EXIT_NETWORK_UNFIT, Outcome, RunError, TrainerResult
from ftbench_operator import status as st
from ftbench_operator.classify import Observation, pod_failure, result_observation
from ftbench_operator.summaries import ContainerState, PodSummary
from ftbench_trainer.network.nccl_log import parse_nccl_log

LOGS = Path(__file__).parent / "nccl_logs"
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def from_log(name: str, peak_gbps: float = 40.0) -> NetworkInEffect:
    """The trainer's result for a 16-rank preflight whose NCCL log is fixture `name`."""
    net = parse_nccl_log((LOGS / name).read_text().splitlines())
    sample = BandwidthSample(
        collective=Collective.ALL_REDUCE,
        size_bytes=128 << 20,
        seconds=0.005,
        alg_bandwidth_gbps=round(peak_gbps / 1.875, 3),
        bus_bandwidth_gbps=peak_gbps,
    )
    return NetworkInEffect(
        backend="nccl",
        transport=net.transport,
        link_layer=net.link_layer,
        rdma=net.transport == "ib",
        gpu_direct_rdma=net.gpu_direct_rdma,
        devices=list(net.devices),
        fallback=net.fallback,
        nccl_version=net.version,
        ranks=16,
        warmup_iterations=2,
        iterations=10,
        seconds=4.2,
        bandwidth=[sample],
        peak_bus_bandwidth_gbps=peak_gbps,
    )


ROCE = NetworkExpectation(roce=True, bus_bandwidth_gbps=45.0)


@pytest.mark.parametrize(
    ("log", "peak", "expect", "ok", "reason"),
    [
        ("roce-gdr.log", 40.0, ROCE, True, "AsExpected"),
        ("roce-not-found.log", 40.0, ROCE, False, "SocketTransport"),  # the silent fallback
        ("socket-forced.log", 1.1, ROCE, False, "SocketTransport"),  # both problems: the transport first
        ("ib-no-gdr.log", 40.0, ROCE, False, "RoceNotInEffect"),  # IB verbs, InfiniBand link layer
        ("roce-gdr.log", 12.0, ROCE, False, "LowBusBandwidth"),  # RoCE, but 27% of the profile's figure
        ("roce-not-found.log", 40.0, NetworkExpectation(), True, "AsExpected"),  # no enableRoce: sockets are fine
        ("roce-gdr.log", 12.0, NetworkExpectation(roce=True), True, "AsExpected"),  # no expectation: not checked
    ],
)
def test_verdicts(log: str, peak: float, expect: NetworkExpectation, ok: bool, reason: str) -> None:
    verdict = network_verdict(from_log(log, peak), expect)
    assert (verdict.ok, verdict.reason) == (ok, reason), verdict.message


def test_verdict_messages_say_why() -> None:
    both = network_verdict(from_log("socket-forced.log", 1.1), ROCE)
    assert "TCP sockets on enp225s0f1" in both.message and "1.1 GB/s is 2% of the 45 GB/s" in both.message
    fallback = network_verdict(from_log("roce-not-found.log"), ROCE)
    assert "after 'NET/IB : No device found.'" in fallback.message
    good = network_verdict(from_log("roce-gdr.log"), ROCE)
    assert good.message.startswith("nccl over ib (RoCE), GPUDirect RDMA on mlx5_10:1/RoCE,mlx5_11:1/RoCE, 16 ranks")


def _result(network: NetworkInEffect, outcome: Outcome = Outcome.SUCCEEDED) -> TrainerResult:
    rule = OUTCOMES[outcome]
    env = RunEnvironment(engine="trl", device="cuda", world_size=16, number_nodes=2, network=network)
    error = None if outcome == Outcome.SUCCEEDED else RunError(type="NetworkUnfitError", message="run.requireRoce")
    return TrainerResult(
        outcome=outcome, is_valid=rule.is_valid, reason=rule.result_reason, environment=env, error=error
    )


def test_status_carries_the_network_and_its_condition() -> None:
    result = _result(from_log("roce-not-found.log"))
    obs = Observation(Phase.FAILED, "TrainingError", "x", result)  # any finished run with an environment
    patch = st.StatusBuilder({}, 1, NOW).observed(obs, trials=1, network=ROCE)
    status = FineTuneExperimentStatus.model_validate(patch)  # the CRD's shape
    assert status.environment is not None and status.environment.network is not None
    assert status.environment.network.transport == "socket" and status.environment.network.peak_bus_bandwidth_gbps == 40
    cond = next(c for c in status.conditions if c.type == ConditionType.NETWORK_AS_EXPECTED)
    assert (cond.status, cond.reason) == ("False", "SocketTransport")


def test_require_roce_is_invalid_before_training() -> None:
    """The trainer's NetworkUnfit result (or only its exit code) is phase Invalid, reason RoceNotInEffect."""
    result = _result(from_log("roce-not-found.log"), Outcome.NETWORK_UNFIT)
    pod = PodSummary(
        name="p", phase="Failed", created="", start_time="", container=ContainerState("terminated", "", "", 43)
    )
    obs = result_observation(TrainerResult.from_json(result.to_termination_message()), pod)
    assert (obs.phase, obs.reason) == (Phase.INVALID, "RoceNotInEffect")
    no_result = pod_failure(pod)
    assert no_result is not None and (no_result.phase, no_result.reason) == (Phase.INVALID, "RoceNotInEffect")
    assert EXIT_NETWORK_UNFIT == 43 and OUTCOMES[Outcome.NETWORK_UNFIT].is_valid is False
    patch = st.StatusBuilder({}, 1, NOW).observed(obs, trials=1, network=ROCE)
    assert patch["phase"] == "Invalid" and patch["isValid"] is False
    assert patch["environment"]["network"]["fallback"] == "NET/IB : No device found."
