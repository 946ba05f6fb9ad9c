"""How an interval and the noise flags read in a terminal, an export or a report: one wording."""

from __future__ import annotations

from ftbench.contracts.results import Metrics
from ftbench.stats.noise import describe


def steady_throughput(m: Metrics) -> str:
    """`12,345 tokens/s ±2.1% (95% CI 12,086-12,604, 180 steps)`, or why there is no interval."""
    value = f"{m.steady_state_tokens_per_second:,.0f}"
    low, high = m.steady_state_tokens_per_second_ci95_low, m.steady_state_tokens_per_second_ci95_high
    if low is None or high is None or m.throughput_ci95_relative is None:
        return f"{value} (no interval: {m.measured_steps} measured steps, at least 4 needed)"
    return f"{value} ±{m.throughput_ci95_relative:.1%} (95% CI {low:,.0f}-{high:,.0f}, {m.measured_steps} steps)"


def steady_short(m: Metrics) -> str:
    """`12,345 ±2.1%` (a table cell); the bare value without an interval."""
    value = f"{m.steady_state_tokens_per_second:,.1f}"
    return value if m.throughput_ci95_relative is None else f"{value} ±{m.throughput_ci95_relative:.1%}"


def flag_names(m: Metrics | None) -> str:
    """`clean` or the flags' names, comma-separated (a table cell)."""
    return "" if m is None else ",".join(f.value for f in m.noise_flags) or "clean"


def noise(m: Metrics) -> str:
    """`clean`, or each flag with what it means and what to do, `; `-separated."""
    if not m.noise_flags:
        return "clean"
    return "; ".join(f"{f.value}: {describe(f)}" for f in m.noise_flags)
