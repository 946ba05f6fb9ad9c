"""A sweep's runs as `ftbench sweep` or the operator records them, for the report tests.

A 2 GPU-count x 5 batch LoRA sweep with 2 repeats in which the largest per-device batches run out
of GPU memory (and the pruning skips those above them), a CPU sweep with no GPU data, and a 2-GPU sweep
whose runs carry the network preflight (built as `NetworkInEffect` values, no training). The numbers
follow simple laws so a test can state what each table cell must be.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.contracts.environment import RunEnvironment
from ftbench.contracts.network import BandwidthSample, Collective, NetworkInEffect, NetworkTransport
from ftbench.contracts.results import TrainerResult

GPU_SWEEP = {
    "template": {"experiment": "finetune_lora_benchmark-v1.0.0", "engine": "trl", "model": "llama3.1-8b",
                 "datasetId": "news-tokens-16384plus-entries-4096", "modelMaxLength": 1024,
                 "gpuModel": "NVIDIA-A100-SXM4-80GB", "maxSteps": 20},
    "matrix": {"numberGpus": [1, 2], "batchSize": [2, 4, 8, 16, 32]},
    "repeats": 2,
}  # fmt: skip
CPU_SWEEP = {
    "template": {"experiment": "finetune_lora_benchmark-v1.0.0", "engine": "trl", "model": "ftbench-tiny-llama",
                 "datasetId": "news-chars-512-entries-4096", "numberGpus": 0, "maxSteps": 10, "modelMaxLength": 512,
                 "torchDtype": "float32", "gradientCheckpointing": False},
    "matrix": {"batchSize": [2, 4]},
}  # fmt: skip
# Per-device batch at which a GPU count runs out of memory.
OOM_AT = {1: 8, 2: 16}
START = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def metrics(tokens_per_second: float, memory: float | None, mfu: float | None, step: float) -> dict[str, Any]:
    return {
        "trainRuntimeSeconds": 20 * step, "trainSteps": 20, "trainSamples": 80, "trainTokens": 81920,
        "trainNonPaddingTokens": 80000, "trainSamplesPerSecond": 4 / step, "trainStepsPerSecond": 1 / step,
        "trainTokensPerSecond": tokens_per_second, "trainTokensPerGpuPerSecond": tokens_per_second,
        "datasetTokensPerSecond": 0.9 * tokens_per_second, "datasetTokensPerSecondPerGpu": 0.9 * tokens_per_second,
        "gpuMemoryUtilizationPeakPercent": memory, "mfuPercent": mfu, "stepTimeP50Seconds": step,
        "stepTimeP95Seconds": 1.1 * step, "stepTimeCv": 0.02,
    }  # fmt: skip


def succeeded(m: dict[str, Any]) -> TrainerResult:
    return TrainerResult.model_validate({"outcome": "Succeeded", "isValid": True, "metrics": m})


def out_of_memory() -> TrainerResult:
    return TrainerResult.model_validate({
        "outcome": "GpuOom", "isValid": False, "reason": "GpuOutOfMemory",
        "error": {"type": "torch.OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2.00 GiB"},
    })  # fmt: skip


def gpu_measure(spec: FineTuneExperimentSpec, repeat: int) -> TrainerResult | None:
    per_device = spec.batch_size // spec.number_gpus
    if spec.number_gpus == 1 and per_device > OOM_AT[1]:
        return None  # above the OOM point: Skipped
    if per_device >= OOM_AT[spec.number_gpus]:
        return out_of_memory()
    tokens = 1000.0 * spec.number_gpus * per_device**0.5 * (1.0 + 0.02 * repeat)
    memory = 20.0 + 9.0 * per_device + 4.0 * spec.number_gpus
    return succeeded(metrics(tokens, memory, 30.0 + per_device - spec.number_gpus, 0.5 + 0.01 * repeat))


def cpu_measure(spec: FineTuneExperimentSpec, repeat: int) -> TrainerResult:
    return succeeded(metrics(100.0 * spec.batch_size, None, None, 0.25))  # CPU ranks: no GPU memory, no MFU


def table(md: str, heading: str) -> list[dict[str, str]]:
    """The first Markdown table after `heading`, as dicts."""
    section = md.split(heading, 1)[1].split("\n\n|", 1)[1]
    lines = ("|" + section).split("\n\n", 1)[0].splitlines()
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


# A sweep over the per-device batch on 2 GPUs whose runs each start with the network preflight: points 0 and 1
# on RoCE near 45 GB/s, point 2 on a node pair where NCCL fell back to TCP sockets.
NET_SWEEP = {
    "template": GPU_SWEEP["template"] | {"numberGpus": 2},
    "matrix": {"batchSize": [4, 8, 16]},
}
PREFLIGHT_SIZES = (64 << 10, 1 << 20, 16 << 20, 128 << 20)


def network(
    transport: str, peak: float, link_layer: str = "", sizes: tuple[int, ...] = PREFLIGHT_SIZES
) -> NetworkInEffect:
    """A 2-rank preflight whose allReduce busbw doubles with each size up to `peak` at the largest
    (allGather at 80 % of it), algbw and time following from busbw as nccl-tests define them."""
    samples = []
    for collective, scale, factor in ((Collective.ALL_REDUCE, 1.0, 1.0), (Collective.ALL_GATHER, 0.8, 0.5)):
        for i, size in enumerate(sizes):
            busbw = peak * scale * 2.0 ** (i + 1 - len(sizes))
            samples.append(BandwidthSample(collective=collective, size_bytes=size, seconds=size / (busbw / factor * 1e9),
                                           alg_bandwidth_gbps=busbw / factor, bus_bandwidth_gbps=busbw))  # fmt: skip
    return NetworkInEffect(backend="nccl", transport=NetworkTransport(transport), link_layer=link_layer,
                           rdma=transport == "ib", devices=["mlx5_0:1/RoCE"] if link_layer else ["eth0"], ranks=2,
                           warmup_iterations=2, iterations=10, seconds=3.0, bandwidth=samples,
                           peak_bus_bandwidth_gbps=peak)  # fmt: skip


NET_PEAKS = {4: ("ib", "RoCE", 45.0), 8: ("ib", "RoCE", 47.0), 16: ("socket", "", 10.0)}


def with_network(result: TrainerResult, preflight: NetworkInEffect) -> TrainerResult:
    return result.model_copy(update={"environment": RunEnvironment(engine="trl", world_size=2, network=preflight)})


def net_measure(spec: FineTuneExperimentSpec, repeat: int) -> TrainerResult:
    transport, link_layer, peak = NET_PEAKS[spec.batch_size]
    return with_network(
        succeeded(metrics(800.0 * spec.batch_size, 50.0, 40.0, 0.5)), network(transport, peak, link_layer)
    )
