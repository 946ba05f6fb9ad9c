"""Model FLOPs utilisation (MFU): achieved model FLOP/s over the GPUs' peak dense FLOP/s; one source for
the trainer's measured MFU and the throughput prediction (ftbench.predict.throughput).

Training FLOPs of one batch (padded tokens), PaLM's accounting (appendix B) extended to frozen base weights:

    flops = (4 * N + 2 * N_trainable) * tokens + 12 * L * d * sum_rows(T_row ** 2)

MFU = flops / train_runtime / (number_gpus * peak). The peak is the dense (non-sparse) tensor-core
FLOP/s of the GPU for the training dtype, from the vendor data sheets below; unknown GPUs and CPU
runs report 0. Recomputation by gradient checkpointing is not counted.

Design notes: docs/design-notes.md, "ftbench/stats/flops.py".
"""

from __future__ import annotations

# Dense peak TFLOP/s: (bf16/fp16 tensor core, fp32 via TF32 tensor core), each pair stated once with
# the products whose data sheets give it. Names are matched in order: one containing another first.
_PEAK_TFLOPS: tuple[tuple[tuple[str, ...], float, float], ...] = (
    (("H200",), 989.0, 494.0),
    (("H100 PCIe",), 756.0, 378.0),
    (("H100 NVL",), 835.0, 418.0),
    (("H100", "H800", "GH200"), 989.0, 494.0),  # H100: SXM
    (("B200",), 2250.0, 1100.0),
    (("A100", "A800"), 312.0, 156.0),
    (("L40S",), 362.0, 183.0),
    (("L40",), 181.0, 90.5),
    (("L4",), 121.0, 60.0),
    (("A10G",), 70.0, 35.0),
    (("A10",), 125.0, 62.5),
    (("V100",), 125.0, 15.7),
    (("T4",), 65.0, 8.1),
)


def peak_flops(gpu_name: str, dtype: str) -> float:
    """Peak dense FLOP/s of one GPU for `dtype` (bfloat16/float16 or float32); 0 if unknown."""
    name = gpu_name.upper().replace("NVIDIA", "").replace("-", " ")
    for keys, half, single in _PEAK_TFLOPS:
        if any(key.upper() in name for key in keys):
            return (single if dtype == "float32" else half) * 1e12
    return 0.0


def gpu_family(gpu_name: str) -> str:
    """The data-sheet table's name for a GPU model ("H100", "A100", ...); "" if unknown."""
    name = gpu_name.upper().replace("NVIDIA", "").replace("-", " ")
    for keys, _, _ in _PEAK_TFLOPS:
        if any(key.upper() in name for key in keys):
            return keys[0]
    return ""


def training_flops(
    *, parameters: int, trainable: int, tokens: int, layers: int, hidden: int, length_squared: int
) -> float:
    """Model FLOPs of training on `tokens` padded tokens (formula in the module docstring)."""
    return (4 * parameters + 2 * trainable) * tokens + 12 * layers * hidden * length_squared


def recompute_flops(*, parameters: int, tokens: int, layers: int, hidden: int, length_squared: int) -> float:
    """The forward pass gradient checkpointing runs again in the backward pass (hardware FLOPs, not model
    FLOPs): 2N per token and the forward third of the attention term."""
    return 2 * parameters * tokens + 4 * layers * hidden * length_squared


def mfu_percent(flops: float, seconds: float, gpus: int, peak: float) -> float | None:
    """None where it does not apply: no GPU, or a GPU whose peak ftbench does not know (peak 0)."""
    if gpus <= 0 or peak <= 0:
        return None
    if seconds <= 0:
        return 0.0
    return 100.0 * flops / seconds / (gpus * peak)
