"""How an interval and the noise flags read in a terminal, an export or a report: one wording."""

from __future__ import annotations

from ftbench.contracts.quality import IntervalScope
from ftbench.contracts.results import Metrics
from ftbench.stats.noise import describe

# A figure that does not apply to a run (GPU figures of CPU ranks, MFU without a known peak): absent
# in the result and the status, this in a table; never a 0, which reads as a measurement.
NOT_APPLICABLE = "n/a"


def figure(value: float | None, digits: int = 1, *, measured: bool = True) -> str:
    """A table cell: the value; n/a where a measured run has none (it does not apply); empty where
    nothing was measured (a failed or pending run)."""
    if value is None:
        return NOT_APPLICABLE if measured else ""
    return f"{value:,.{digits}f}"


# What a single run's interval cannot say: each process lands on its own speed (docs/benchmarks.md).
REPEAT_TO_CONFIRM = "repeat to confirm"


def steady_throughput(m: Metrics) -> str:
    """`12,345 tokens/s ±2.1% within this run (95% CI 12,086-12,604, 180 steps; repeat to confirm)`, or
    `... ±2.1% across repeats (95% CI ...)`, or why there is no interval."""
    value = f"{m.steady_state_tokens_per_second:,.0f}"
    low, high = m.steady_state_tokens_per_second_ci95_low, m.steady_state_tokens_per_second_ci95_high
    if low is None or high is None or m.throughput_ci95_relative is None:
        return f"{value} (no interval: {m.measured_steps} measured steps, at least 4 needed)"
    ci = f"95% CI {low:,.0f}-{high:,.0f}"
    if m.throughput_ci95_scope == IntervalScope.ACROSS_REPEATS:
        return f"{value} ±{m.throughput_ci95_relative:.1%} across repeats ({ci})"
    return f"{value} ±{m.throughput_ci95_relative:.1%} within this run ({ci}, {m.measured_steps} steps; {REPEAT_TO_CONFIRM})"


def steady_short(m: Metrics) -> str:
    """`12,345 ±2.1% (run)` or `12,345 ±2.1% (repeats)` (a table cell); the bare value without an interval."""
    value = f"{m.steady_state_tokens_per_second:,.1f}"
    if m.throughput_ci95_relative is None:
        return value
    scope = "repeats" if m.throughput_ci95_scope == IntervalScope.ACROSS_REPEATS else "run"
    return f"{value} ±{m.throughput_ci95_relative:.1%} ({scope})"


def flag_names(m: Metrics | None) -> str:
    """`clean` or the flags' names, comma-separated (a table cell)."""
    return "" if m is None else ",".join(f.value for f in m.noise_flags) or "clean"


def noise(m: Metrics) -> str:
    """`clean`, or each flag with what it means and what to do, `; `-separated."""
    if not m.noise_flags:
        return "clean"
    return "; ".join(f"{f.value}: {describe(f)}" for f in m.noise_flags)


def rows_trained(m: Metrics | None) -> str:
    """`1,366/4,096` (rows that kept a trained token of the rows offered: a table cell); empty where not counted."""
    if m is None or m.rows_trained is None:
        return ""
    return f"{m.rows_trained:,}" + ("" if m.rows_offered is None else f"/{m.rows_offered:,}")


def rows_sentence(m: Metrics) -> str:
    """The data a run trained on, in words (`ftbench run`'s table)."""
    if m.rows_trained is None:
        return "not counted (image rows)"
    if m.rows_offered is None or m.rows_offered == m.rows_trained:
        return f"{m.rows_trained:,} rows, every one with a trained token"
    cut = m.rows_offered - m.rows_trained
    return (
        f"{m.rows_trained:,} of {m.rows_offered:,} rows keep a trained token; {cut:,} ({cut / m.rows_offered:.0%}) "
        "lost their whole response to truncation at modelMaxLength"
    )
