"""Other work on the host while the run trains: CPU steal and runnable threads beyond the CPUs.

Read from Linux's /proc once per sample by the system sampler (a few small file reads, never on the
training step's path). `procs_running` in /proc/stat counts every runnable thread of the host (in
a container too); the run's own runnable threads are those in state R under /proc/<pid>/task of its
processes (this rank and, under a launcher, its sibling ranks). Per sample, the threads of others
that exceed the CPUs are `min(others, max(0, running - cpus))`: others that had a CPU to spare do
not count. The noise rule (ftbench.stats.noise) reads the mean of that and the steal share of
the CPU time over the window. Without /proc (not Linux) everything reads 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostReading:
    """One sample: cumulative CPU jiffies (steal and all) and the runnable-thread counts."""

    steal: int = 0
    total: int = 0
    running: int = 0  # runnable threads on the host
    own_running: int = 0  # runnable threads of the run's processes
    cpus: int = 1

    @property
    def contended_threads(self) -> int:
        others = max(0, self.running - self.own_running)
        return min(others, max(0, self.running - self.cpus))


def parse_proc_stat(text: str) -> tuple[int, int, int]:
    """(steal jiffies, all jiffies, procs_running) from /proc/stat's text."""
    steal = total = running = 0
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:]]
            # user nice system idle iowait irq softirq steal guest guest_nice; guests are inside user.
            total = sum(values[:8])
            steal = values[7] if len(values) > 7 else 0
        elif fields and fields[0] == "procs_running":
            running = int(fields[1])
    return steal, total, running


def task_state(stat_text: str) -> str:
    """The state letter of a /proc/<pid>/task/<tid>/stat line (after the parenthesised name)."""
    rest = stat_text[stat_text.rfind(")") + 1 :].split()
    return rest[0] if rest else ""


def running_threads(pids: list[int], proc: Path = Path("/proc")) -> int:
    """Threads in state R of the given processes (vanished ones count 0)."""
    count = 0
    for pid in pids:
        try:
            tasks = list((proc / str(pid) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                count += task_state((task / "stat").read_text()) == "R"
            except OSError:
                continue
    return count


def psutil_error() -> type[Exception]:
    """psutil's base error (a process gone, access denied); OSError without the package."""
    try:
        from psutil import Error
    except ImportError:
        return OSError
    return Error


def run_pids() -> list[int]:
    """This process and, when a launcher started several local ranks, its sibling ranks."""
    me = os.getpid()
    if int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1) <= 1:
        return [me]
    try:
        import psutil

        parent = psutil.Process(me).parent()
        return sorted({me, *(p.pid for p in parent.children())}) if parent else [me]
    except (ImportError, OSError, psutil_error()):  # no psutil or the parent is gone: this rank alone
        return [me]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_host(pids: list[int], proc: Path = Path("/proc")) -> HostReading:
    """One reading of the host; zeros where /proc is not there."""
    try:
        steal, total, running = parse_proc_stat((proc / "stat").read_text())
    except OSError:
        return HostReading()
    return HostReading(steal, total, running, running_threads(pids, proc), cpu_count())


def summarize(readings: list[HostReading]) -> tuple[float, float]:
    """(steal % of CPU time between the first and last reading, mean contended threads)."""
    if not readings:
        return 0.0, 0.0
    first, last = readings[0], readings[-1]
    cpu = last.total - first.total
    steal = 100.0 * (last.steal - first.steal) / cpu if cpu > 0 else 0.0
    return steal, sum(r.contended_threads for r in readings) / len(readings)
