"""A background sampler for the GPU (NVML) and the training process (psutil).

One daemon thread per training process samples, every `interval` seconds, the GPUs this process
uses (utilisation, memory, power), the process's CPU and memory, the node's memory, the host's
contention and each GPU's clock-throttle reasons. The thread only appends to lists; statistics are
computed after training over the samples inside the measured window, so warmup samples can be
excluded. Without NVML (no driver, CPU runs) the GPU part records nothing; a failing NVML call is
logged once and disables GPU sampling, never the run.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/measure/system.py".
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from ftbench_trainer.measure import host_load

log = logging.getLogger(__name__)


def _nvml_error() -> type[Exception]:
    """pynvml's base error (every failing NVML call raises a subclass); RuntimeError without it."""
    try:
        from pynvml import NVMLError
    except ImportError:
        return RuntimeError
    return NVMLError


# What "no driver, no GPU, no package, not supported here" raises: the package missing (ImportError),
# the library not loadable (OSError), any NVML call failing (NVMLError), and a binding older than the
# call (AttributeError) or a stand-in's RuntimeError. A programming error elsewhere still surfaces.
NVML_ERRORS: tuple[type[Exception], ...] = (ImportError, OSError, AttributeError, RuntimeError, _nvml_error())
# psutil's own errors (a process gone, access denied) and the package or /proc missing.
PSUTIL_ERRORS: tuple[type[Exception], ...] = (ImportError, OSError, AttributeError, host_load.psutil_error())


@dataclass
class GpuSample:
    t: float
    compute_percent: float
    memory_percent: float
    power_watts: float
    power_percent: float
    gpu: int = 0  # which of this process's GPUs (DataParallel drives several)
    throttled: bool = False  # NVML reported a throttle reason that counts (`throttled`)


@dataclass
class CpuSample:
    t: float
    cpu_percent: float
    memory_percent: float  # this process's resident memory, % of the node's
    node_memory_percent: float = 0.0  # the node's memory in use by any process, %


@dataclass
class HostSample:
    t: float
    reading: host_load.HostReading


@dataclass
class CpuSummary:
    """This process's CPU samples averaged over the measured window (0.0 without psutil)."""

    cpu_percent: float = 0.0
    memory_percent: float = 0.0
    node_memory_percent: float = 0.0
    steal_percent: float = 0.0  # of the host's CPU time over the window
    contended_threads: float = 0.0  # mean runnable threads of others beyond the CPUs


@dataclass
class GpuSummary:
    """One GPU averaged over the measured window, plus its peak memory use."""

    compute_percent: float = 0.0
    memory_percent: float = 0.0
    power_watts: float = 0.0
    power_percent: float = 0.0
    memory_peak_percent: float = 0.0
    throttled_fraction: float = 0.0  # of the samples with a throttle reason that counts


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def nvml_device_index(local_rank: int) -> str | None:
    """The NVML identity (index or UUID) of the GPU this rank's torch device 0 maps to.

    torch numbers GPUs after CUDA_VISIBLE_DEVICES; NVML numbers all of them. accelerate gives
    each rank device `local_rank`, so the rank's GPU is entry `local_rank` of the visible list.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return str(local_rank) if visible is None else None
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    return entries[local_rank] if local_rank < len(entries) else None


def gpu_memory_total_bytes(local_rank: int = 0) -> int | None:
    """NVML's total memory of the GPU this rank's device 0 maps to; None without a GPU or NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        ident = nvml_device_index(local_rank)
        if ident is None:
            return None
        handle = (
            pynvml.nvmlDeviceGetHandleByIndex(int(ident))
            if ident.isdigit()
            else pynvml.nvmlDeviceGetHandleByUUID(ident)
        )
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except NVML_ERRORS:  # no driver, no GPU, no package: nothing to compare with, never a failure
        return None


class SystemSampler:
    """Samples in a daemon thread between `start()` and `stop()`."""

    def __init__(self, *, local_rank: int = 0, use_gpu: bool = True, interval: float = 1.0, gpus: int = 1) -> None:
        self.interval = interval
        self.gpu_samples: list[GpuSample] = []
        self.cpu_samples: list[CpuSample] = []
        self.host_samples: list[HostSample] = []
        self._run_pids = host_load.run_pids()
        self.gpu_name = ""
        self._gpus: list[Any] = []
        self._nvml: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process: Any = None
        self._psutil: Any = None
        if use_gpu:
            for offset in range(max(1, gpus)):
                self._init_nvml(local_rank + offset)
        self._init_psutil()

    def _init_nvml(self, local_rank: int) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            ident = nvml_device_index(local_rank)
            if ident is None:
                return
            if ident.isdigit():
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(ident))
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(ident)
            name = pynvml.nvmlDeviceGetName(handle)
            self.gpu_name = self.gpu_name or (name.decode() if isinstance(name, bytes) else str(name))
            self._nvml = pynvml
            self._gpus.append(handle)
        except NVML_ERRORS as exc:  # no driver / no GPU / no package: GPU metrics stay absent
            log.info("NVML unavailable, GPU metrics will be 0.0: %s", exc)

    def _init_psutil(self) -> None:
        try:
            import psutil

            self._process = psutil.Process(os.getpid())
            self._process.cpu_percent(None)  # first call primes the counter
            self._psutil = psutil
        except PSUTIL_ERRORS as exc:
            log.warning("psutil unavailable, CPU metrics will be 0.0: %s", exc)

    def sample_once(self) -> None:
        now = time.monotonic()
        try:
            for index, handle in enumerate(self._gpus):
                self.gpu_samples.append(self._sample_gpu(now, index, handle))
        except NVML_ERRORS as exc:
            log.warning("NVML sampling failed, GPU sampling disabled: %s", exc)
            self._gpus = []
        self.host_samples.append(HostSample(now, host_load.read_host(self._run_pids)))
        if self._process is not None:
            try:
                self.cpu_samples.append(
                    CpuSample(t=now, cpu_percent=self._process.cpu_percent(None),
                              memory_percent=self._process.memory_percent(),
                              node_memory_percent=float(self._psutil.virtual_memory().percent))
                )  # fmt: skip
            except PSUTIL_ERRORS as exc:
                log.warning("psutil sampling failed, CPU sampling disabled: %s", exc)
                self._process = None

    def _sample_gpu(self, now: float, index: int, handle: Any) -> GpuSample:
        nv = self._nvml
        util = nv.nvmlDeviceGetUtilizationRates(handle)
        mem = nv.nvmlDeviceGetMemoryInfo(handle)
        power_mw = nv.nvmlDeviceGetPowerUsage(handle)
        limit_mw = nv.nvmlDeviceGetEnforcedPowerLimit(handle)
        return GpuSample(
            t=now,
            compute_percent=float(util.gpu),
            memory_percent=100.0 * mem.used / mem.total if mem.total else 0.0,
            power_watts=power_mw / 1000.0,
            power_percent=100.0 * power_mw / limit_mw if limit_mw else 0.0,
            gpu=index,
            throttled=throttled(nv, handle),
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample_once()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ftbench-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample_once()  # the tail of the run, so short runs have at least one sample

    def gpu_summaries(self, start: float, end: float) -> list[GpuSummary]:
        """Each of this process's GPUs averaged over samples in [start, end]; [] without GPUs."""
        indexes = sorted({s.gpu for s in self.gpu_samples})
        summaries = [self._summary([s for s in self.gpu_samples if s.gpu == i], start, end) for i in indexes]
        return [g for g in summaries if g is not None]

    def gpu_summary(self, start: float, end: float) -> GpuSummary | None:
        """This process's first GPU averaged over samples in [start, end]; None when no GPU was sampled."""
        return next(iter(self.gpu_summaries(start, end)), None)

    def _summary(self, samples: list[GpuSample], start: float, end: float) -> GpuSummary | None:
        window = [s for s in samples if start <= s.t <= end + self.interval] or samples
        if not window:
            return None
        return GpuSummary(
            compute_percent=_mean([s.compute_percent for s in window]),
            memory_percent=_mean([s.memory_percent for s in window]),
            power_watts=_mean([s.power_watts for s in window]),
            power_percent=_mean([s.power_percent for s in window]),
            memory_peak_percent=max(s.memory_percent for s in samples),
            throttled_fraction=_mean([float(s.throttled) for s in window]),
        )

    def cpu_summary(self, start: float, end: float) -> CpuSummary:
        """This process's CPU % and memory %, and its node's memory used %, averaged over the
        samples in [start, end]."""
        window = [s for s in self.cpu_samples if start <= s.t <= end + self.interval] or self.cpu_samples
        host = [h.reading for h in self.host_samples if start <= h.t <= end + self.interval]
        steal, contended = host_load.summarize(host or [h.reading for h in self.host_samples])
        return CpuSummary(
            cpu_percent=_mean([s.cpu_percent for s in window]),
            memory_percent=_mean([s.memory_percent for s in window]),
            node_memory_percent=_mean([s.node_memory_percent for s in window]),
            steal_percent=steal,
            contended_threads=contended,
        )


# NVML clock-event (throttle) reasons that make a GPU's figures not those of its model: HW slowdown
# 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80 (heat, a failing supply, an external
# brake). SW power cap 0x4 only where the enforced power limit is below the board's default: at the
# default limit it is how a GPU runs heavy training (an H200 training llama-7b sat at its 700 W limit
# with SW power cap active and the SM clock at 1500-1620 of 1980 MHz, step times within 0.5 %:
# docs/benchmarks.md, GPU matrix), so flagging it would flag every such run. Idle (0x1), application
# clock settings (0x2) and sync boost (0x10) are not noise.
SW_POWER_CAP = 0x4
THROTTLE_REASONS = 0x8 | 0x20 | 0x40 | 0x80


def throttled(nv: Any, handle: Any) -> bool:
    """Whether NVML reports a thermal or hardware throttle reason now, or the power cap while the
    limit is set below the board's default (False where the driver can't say)."""
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        call = getattr(nv, name, None)
        if call is None:
            continue
        try:
            reasons = int(call(handle))
        except NVML_ERRORS:  # not supported on this GPU or driver: no throttle information
            return False
        return bool(reasons & THROTTLE_REASONS) or bool(reasons & SW_POWER_CAP and _power_limit_lowered(nv, handle))
    return False


def _power_limit_lowered(nv: Any, handle: Any) -> bool:
    """The enforced power limit is below the board's default (someone capped the GPU)."""
    try:
        return int(nv.nvmlDeviceGetEnforcedPowerLimit(handle)) < int(
            nv.nvmlDeviceGetPowerManagementDefaultLimit(handle)
        )
    except NVML_ERRORS:  # the driver can't say: the cap is taken as the board's own
        return False
