"""Adapters for the API breaks of `tuning.sft_trainer` across fms-hf-tuning releases.

`parse_arguments` returns a tuple whose length and order changed five times (2.3.1, 2.4.0, 2.5.0,
3.0.0, 3.1.0) and `train` grew keywords and a third return value. Each API class below lists the
names `parse_arguments` returns in that release's own source (a test compares them with every
installed release's source); the values are bound to those names, passed to `train` under its own
keyword names (only those its signature has), and from there every release is treated the same.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable
from typing import Any

from ftbench.engines.releases import ApiClass

_V2_HEAD = ("model_args", "data_args", "training_args", "trainer_controller_args", "tune_config")
_V2_TRACKERS = ("file_logger_config", "aim_config")
_PLUGINS = ("quantized_lora_config", "fusedops_kernels_config", "attention_and_distributed_packing_config")

PARSE_RETURNS: dict[ApiClass, tuple[str, ...]] = {
    "2.0": (*_V2_HEAD, *_V2_TRACKERS, *_PLUGINS, "exp_metadata"),
    "2.3": (*_V2_HEAD, *_V2_TRACKERS, *_PLUGINS, "mlflow_config", "exp_metadata"),
    "2.4": (*_V2_HEAD, *_V2_TRACKERS, *_PLUGINS, "fast_moe_config", "mlflow_config", "exp_metadata"),
    "2.5": (
        *_V2_HEAD,
        *_V2_TRACKERS,
        "hf_resource_scanner_config",
        *_PLUGINS,
        "fast_moe_config",
        "mlflow_config",
        "exp_metadata",
    ),
    "3.0": (*_V2_HEAD, *_PLUGINS, "fast_moe_config", "tracker_configs", "exp_metadata"),
    "3.1": (*_V2_HEAD, "quantization_config", *_PLUGINS, "fast_moe_config", "tracker_configs", "exp_metadata"),
}

# `parse_arguments` names whose `train` keyword is spelled differently (the same in every release).
TRAIN_KEYWORDS = {"training_args": "train_args", "tune_config": "peft_config"}
# Passed on from the parse as `main()` does, except exp_metadata (a JSON string main() decodes; unused).
NOT_PASSED = {"exp_metadata"}


class FmsApiError(RuntimeError):
    """The installed release does not have the shape its API class says."""


def parse(sft_trainer: Any, api: ApiClass, args: list[str]) -> dict[str, Any]:
    """The release's own `parse_arguments` over `args`, bound to its own return names."""
    names = PARSE_RETURNS[api]
    saved = sys.argv
    sys.argv = ["sft_trainer", *args]  # parse_arguments reads sys.argv
    try:
        values = sft_trainer.parse_arguments(sft_trainer.get_parser())
    finally:
        sys.argv = saved
    if len(values) != len(names):
        raise FmsApiError(
            f"parse_arguments returned {len(values)} values; API class {api} expects {len(names)} ({', '.join(names)})"
        )
    return dict(zip(names, values, strict=True))


def tracker_configs(parsed: dict[str, Any]) -> Any:
    """3.x parses one `tracker_configs`; 2.x parses one config per tracker and main() combines them."""
    if "tracker_configs" in parsed:
        return parsed["tracker_configs"]
    from tuning.config.tracker_configs import TrackerConfigFactory

    fields = {f.name for f in dataclasses.fields(TrackerConfigFactory)}
    return TrackerConfigFactory(**{k: v for k, v in parsed.items() if k in fields})


def train_kwargs(train: Callable[..., Any], parsed: dict[str, Any], callbacks: list[Any]) -> dict[str, Any]:
    accepted = set(inspect.signature(train).parameters)
    kwargs = {
        TRAIN_KEYWORDS.get(name, name): value
        for name, value in parsed.items()
        if name not in NOT_PASSED and TRAIN_KEYWORDS.get(name, name) in accepted
    }
    kwargs["tracker_configs"] = tracker_configs(parsed)
    kwargs["additional_callbacks"] = callbacks or None
    return kwargs


def train(sft_trainer: Any, parsed: dict[str, Any], callbacks: list[Any]) -> Any:
    """`train(...)` with the release's keywords; returns the trainer (first of 2 or 3 return values)."""
    out = sft_trainer.train(**train_kwargs(sft_trainer.train, parsed, callbacks))
    return out[0] if isinstance(out, tuple) else out
