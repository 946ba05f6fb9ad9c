"""Counting GPUs says why it counted none (issue 62: no exception swallowed without a word).

Real faults only: this machine's NVML (absent, or no driver), and an nvidia-smi on PATH that answers or
cannot be executed at all."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from ftbench.host.gpus import machine_gpu_count


def _smi(folder: Path, body: bytes) -> None:
    smi = folder / "nvidia-smi"
    smi.write_bytes(body)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)


def test_nvidia_smi_counts_where_nvml_cannot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _smi(tmp_path, b"#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: a)'\necho 'GPU 1: NVIDIA H200 (UUID: b)'\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML: it answers before nvidia-smi")
    except Exception:  # no bindings (ImportError), or no driver (NVMLError): nvidia-smi answers
        pass
    assert machine_gpu_count() == 2


def test_an_nvidia_smi_that_cannot_run_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _smi(tmp_path, b"\x7fELF not a program")
    monkeypatch.setenv("PATH", str(tmp_path))
    with caplog.at_level(logging.INFO, logger="ftbench.host.gpus"):
        count = machine_gpu_count()
    if count:
        pytest.skip("this machine's NVML counts its GPUs")
    assert "nvidia-smi -L failed" in caplog.text
