"""Bandwidth as nccl-tests defines it (doc/PERFORMANCE.md of NVIDIA/nccl-tests). Pure, no torch.

    algbw = S / t          S: the message size, t: the time of one collective
    busbw = algbw * factor, the factor making busbw comparable with the links' peak whatever n is:
        all_reduce   2(n-1)/n   (S: each rank's buffer)
        all_gather    (n-1)/n   (S: the total gathered size, n x each rank's chunk)

GB/s are 1e9 bytes per second, as nccl-tests print them.
"""

from __future__ import annotations

from ftbench.contracts.network import BandwidthSample, Collective

GB = 1e9
# Rounded figures keep the result (and the 4 KiB termination message) short.
SIGNIFICANT = 4


def bus_factor(collective: Collective, ranks: int) -> float:
    """busbw / algbw for `collective` over `ranks` ranks (0 for one rank: nothing crosses a link)."""
    if ranks < 2:
        return 0.0
    if collective == Collective.ALL_REDUCE:
        return 2 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


def _round(value: float) -> float:
    return float(f"{value:.{SIGNIFICANT}g}")


def sample(collective: Collective, size_bytes: int, seconds: float, ranks: int) -> BandwidthSample:
    """One size's figures from its mean iteration time."""
    algbw = size_bytes / seconds / GB if seconds > 0 else 0.0
    return BandwidthSample(
        collective=collective,
        size_bytes=size_bytes,
        seconds=_round(seconds),
        alg_bandwidth_gbps=_round(algbw),
        bus_bandwidth_gbps=_round(algbw * bus_factor(collective, ranks)),
    )


def timed_iterations(most: int, one_iteration_seconds: float, budget_left_seconds: float) -> int:
    """How many timed iterations fit what is left of the budget (at least 1, at most `most`), judged
    from one warm-up iteration's time; 0 when nothing is left."""
    if budget_left_seconds <= 0:
        return 0
    if one_iteration_seconds <= 0:
        return most
    return max(1, min(most, int(budget_left_seconds / one_iteration_seconds)))


def peak_bus_bandwidth(samples: list[BandwidthSample]) -> float:
    return max((s.bus_bandwidth_gbps for s in samples), default=0.0)
