"""The network preflight: every rank times all-reduce and all-gather before training, as nccl-tests do.

Called by the worker (`ftbench_trainer.worker`) on every rank before the engine starts, when the plan
has `networkPreflight`. It initialises the default process group itself, with the backend accelerate
would choose, so the group the test measures is the one training uses. The time of a message size is
the slowest rank's mean, which every rank shares, so every rank makes the same decisions and the same
report. With NCCL, every rank's network lines are read together (`nccl_log`) for the transport really
used; gloo (CPU ranks) prints nothing of the kind: its transport is TCP.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/network/preflight.py".
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ftbench.api.network import describe
from ftbench.contracts import env as E
from ftbench.contracts.network import (
    BANDWIDTH_SAMPLE_LIMIT,
    NETWORK_DEVICE_LIMIT,
    BandwidthSample,
    Collective,
    NetworkInEffect,
    NetworkTransport,
)
from ftbench.contracts.plan import NetworkPreflightSettings
from ftbench_trainer.network.bandwidth import peak_bus_bandwidth, sample, timed_iterations
from ftbench_trainer.network.nccl_log import NcclNetwork, network_lines, parse_nccl_log

log = logging.getLogger(__name__)

# The most of one rank's NCCL log read back (its network lines come first, at communicator init).
NCCL_LOG_LIMIT = 256 * 1024
ELEMENT_BYTES = 4  # float32
# Each process's NCCL log in the pod's (or local run's) output directory; NCCL fills in the pid.
NCCL_LOG_NAME = "nccl-%p.log"


def process_group_backend(use_cpu: bool, cuda: bool, environ: Mapping[str, str]) -> str:
    """The backend accelerate's `PartialState` initialises for these ranks (accelerate/state.py), so
    the group made here is the one it keeps: gloo on CPU ranks; NCCL on GPUs, with gloo beside it for
    CPU tensors where accelerate adds it (FSDP with offload or a full state dict)."""
    if use_cpu or not cuda:
        return "gloo"
    fsdp = environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    offload = environ.get("FSDP_OFFLOAD_PARAMS", "false").lower() == "true"
    full_state = environ.get("FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT") == "FULL_STATE_DICT"
    return "cuda:nccl,cpu:gloo" if fsdp and (offload or full_state) else "nccl"


def nccl_debug_env(environ: Mapping[str, str], log_dir: Path) -> dict[str, str]:
    """The NCCL_DEBUG* values to set so NCCL prints its network lines into a file we read: INFO (TRACE
    kept), subsystems INIT and NET added to any the pod sets, our file unless the pod names one."""
    out: dict[str, str] = {}
    if environ.get(E.NCCL_DEBUG, "").upper() not in (E.NCCL_PREFLIGHT_DEBUG, "TRACE"):
        out[E.NCCL_DEBUG] = E.NCCL_PREFLIGHT_DEBUG
    subsys = [s for s in environ.get(E.NCCL_DEBUG_SUBSYS, "").split(",") if s]
    if "ALL" not in subsys and not set(E.NCCL_PREFLIGHT_SUBSYS) <= set(subsys):
        out[E.NCCL_DEBUG_SUBSYS] = ",".join(dict.fromkeys([*subsys, *E.NCCL_PREFLIGHT_SUBSYS]))
    if not environ.get(E.NCCL_DEBUG_FILE):
        out[E.NCCL_DEBUG_FILE] = str(log_dir / NCCL_LOG_NAME)
    return out


def debug_file(pattern: str, host: str, pid: int) -> Path:
    """NCCL_DEBUG_FILE with NCCL's %h (the host name up to its first dot, as NCCL cuts it) and %p (pid)."""
    return Path(pattern.replace("%h", host.split(".", 1)[0]).replace("%p", str(pid)))


def init_process_group(use_cpu: bool, log_dir: Path) -> str:
    """The default process group (env:// from the launcher), made here unless it exists; its backend."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return str(dist.get_backend())
    cuda = torch.cuda.is_available()
    backend = process_group_backend(use_cpu, cuda, os.environ)
    if "nccl" in backend:
        log_dir.mkdir(parents=True, exist_ok=True)
        os.environ.update(nccl_debug_env(os.environ, log_dir))  # NCCL reads them once, at its first init
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0") or 0))
    dist.init_process_group(backend=backend)
    return backend


class _Collectives:
    """Buffers and one call per collective on this rank's device."""

    def __init__(self, device: Any, ranks: int) -> None:
        self.device = device
        self.ranks = ranks

    def size_of(self, collective: Collective, size_bytes: int) -> int:
        """S as run: whole float32 elements, the all-gather's a multiple of the rank count."""
        unit = ELEMENT_BYTES * (self.ranks if collective == Collective.ALL_GATHER else 1)
        return max(unit, size_bytes // unit * unit)

    def call(self, collective: Collective, size_bytes: int) -> Any:
        import torch
        import torch.distributed as dist

        if collective == Collective.ALL_REDUCE:
            buf = torch.ones(size_bytes // ELEMENT_BYTES, dtype=torch.float32, device=self.device)
            return lambda: dist.all_reduce(buf)
        out = torch.empty(size_bytes // ELEMENT_BYTES, dtype=torch.float32, device=self.device)
        chunk = torch.ones(out.numel() // self.ranks, dtype=torch.float32, device=self.device)
        return lambda: dist.all_gather_into_tensor(out, chunk)

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def slowest(self, seconds: float) -> float:
        """The largest of every rank's `seconds` (all ranks get it)."""
        import torch
        import torch.distributed as dist

        t = torch.tensor([seconds], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def timed(self, run: Any, iterations: int) -> float:
        """Mean seconds of one of `iterations` calls, the slowest rank's."""
        import torch.distributed as dist

        dist.barrier()
        self.sync()
        start = time.perf_counter()
        for _ in range(iterations):
            run()
        self.sync()
        return self.slowest((time.perf_counter() - start) / iterations)


def measure(settings: NetworkPreflightSettings, coll: _Collectives) -> tuple[list[BandwidthSample], int]:
    """Every collective at every size that fits the budget; also the most timed iterations used."""
    samples: list[BandwidthSample] = []
    budget = settings.time_budget_seconds / len(Collective)
    most = 0
    for collective in Collective:
        spent = 0.0
        for size in settings.sizes_bytes:
            size = coll.size_of(collective, size)
            run = coll.call(collective, size)
            warmup = max(1, settings.warmup_iterations)
            one = coll.timed(run, warmup)  # the warm-up, timed only to size what follows
            spent += one * warmup
            iterations = timed_iterations(settings.iterations, one, budget - spent)
            if iterations == 0:
                log.info("network preflight: %s from %d bytes skipped (time budget spent)", collective.value, size)
                break
            seconds = coll.timed(run, iterations)
            spent += seconds * iterations
            most = max(most, iterations)
            samples.append(sample(collective, size, seconds, coll.ranks))
    return samples[:BANDWIDTH_SAMPLE_LIMIT], most


def read_nccl_logs(log_dir: Path) -> NcclNetwork:
    """Every rank's NCCL lines, gathered to every rank and read together."""
    import torch.distributed as dist

    pattern = os.environ.get(E.NCCL_DEBUG_FILE) or str(log_dir / NCCL_LOG_NAME)
    path = debug_file(pattern, socket.gethostname(), os.getpid())
    try:
        with path.open(errors="replace") as f:
            text = f.read(NCCL_LOG_LIMIT)
    except OSError as exc:
        log.warning("network preflight: NCCL's log %s not readable: %s", path, exc)
        text = ""
    for line in network_lines(text.splitlines()):  # NCCL's network lines stay in the pod's log too
        print(line, flush=True)
    texts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(texts, text)
    return parse_nccl_log(line for t in texts for line in (t or "").splitlines())


def run_preflight(settings: NetworkPreflightSettings, *, use_cpu: bool, log_dir: Path) -> NetworkInEffect:
    """Run the self-test on this rank (every rank must call it) and return what every rank measured."""
    import torch
    import torch.distributed as dist

    started = time.perf_counter()
    backend = init_process_group(use_cpu, log_dir)
    nccl = "nccl" in backend
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    coll = _Collectives(device, dist.get_world_size())
    coll.slowest(0.0)  # the first collective sets up the communicator: not part of any size's time
    samples, iterations = measure(settings, coll)
    if device.type == "cuda":  # the buffers are gone: training's peak-memory figures must not see them
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    network = read_nccl_logs(log_dir) if nccl else NcclNetwork(transport=NetworkTransport.TCP)
    result = NetworkInEffect(
        backend="nccl" if nccl else backend,
        transport=network.transport,
        link_layer=network.link_layer if network.transport == NetworkTransport.IB else "",
        rdma=network.transport == NetworkTransport.IB,
        gpu_direct_rdma=network.gpu_direct_rdma,
        devices=list(network.devices[:NETWORK_DEVICE_LIMIT]),
        fallback=network.fallback,
        nccl_version=network.version,
        ranks=coll.ranks,
        warmup_iterations=max(1, settings.warmup_iterations),
        iterations=iterations,
        seconds=round(time.perf_counter() - started, 3),
        bandwidth=samples,
        peak_bus_bandwidth_gbps=peak_bus_bandwidth(samples),
    )
    log.info("network preflight: %s", describe(result))
    return result
