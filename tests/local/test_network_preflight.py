"""The network preflight on a real 2-rank CPU run: `ftbench run` with run.networkPreflight on times all-reduce
and all-gather over the two gloo ranks before training, keeps the figures in the result and prints them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ftbench.cli import main
from ftbench.contracts.network import Collective, NetworkTransport
from ftbench.contracts.results import Outcome, TrainerResult
from ftbench.local.store import ResultsStore
from ftbench.render.plan import PREFLIGHT_SIZES_CPU

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.training, pytest.mark.slow]


def test_two_cpu_ranks_measure_and_print_the_network(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("trl")
    doc = yaml.safe_load((REPO / "examples" / "fsdp-cpu.yaml").read_text())  # two CPU ranks, FSDP over gloo
    doc["metadata"]["name"] = "net-cpu"
    doc["spec"] |= {"maxSteps": 2, "run": {"networkPreflight": "on"}}
    path = tmp_path / "net.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["run", str(path), "--dataset-entries", "32"]) == 0
    out = capsys.readouterr().out
    [stored] = ResultsStore(home / "results.db").runs()
    result = TrainerResult.model_validate(stored.results[0])
    assert result.outcome == Outcome.SUCCEEDED and result.environment is not None
    assert result.environment.distributed_mode == "FSDP"  # training kept the group the preflight made
    net = result.environment.network
    assert net is not None
    assert (net.backend, net.transport, net.rdma, net.ranks) == ("gloo", NetworkTransport.TCP, False, 2)
    assert [(s.collective, s.size_bytes) for s in net.bandwidth] == [
        (c, size) for c in Collective for size in PREFLIGHT_SIZES_CPU
    ]
    for s in net.bandwidth:  # nccl-tests' factors for n = 2: all-reduce 2(n-1)/n = 1, all-gather (n-1)/n = 1/2
        assert s.seconds > 0 and s.alg_bandwidth_gbps > 0
        factor = 1.0 if s.collective == Collective.ALL_REDUCE else 0.5
        assert s.bus_bandwidth_gbps == pytest.approx(s.alg_bandwidth_gbps * factor, rel=2e-3)
    assert net.peak_bus_bandwidth_gbps == max(s.bus_bandwidth_gbps for s in net.bandwidth)
    assert 1 <= net.iterations <= 10 and net.seconds < 30
    # printed after the properties: the summary line, then one row per collective and size
    assert f"network preflight: gloo over tcp, 2 ranks, peak busbw {net.peak_bus_bandwidth_gbps:g} GB/s" in out
    rows = {tuple(line.split()[:2]): line.split() for line in out.splitlines() if line.startswith("all")}
    for s in net.bandwidth:
        row = rows[(s.collective.value, f"{s.size_bytes:,}")]
        assert row[3:] == [f"{s.alg_bandwidth_gbps:g}", f"{s.bus_bandwidth_gbps:g}"]
