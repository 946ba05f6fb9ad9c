"""fms-hf-tuning: the installed release's `tuning.sft_trainer`, seed 001's command line, our callback.

The arguments are `ftbench.engines.fms_args.sft_trainer_args(plan)` — the command line the seed
runs, with only the flags this release knows — parsed by the release's own parser, so nothing is
re-interpreted here. `fms_api` adapts to the release's API shape; the callback goes in through
`train(additional_callbacks=...)`, the extension point every release offers. The release that
runs must be the one the plan asks for (`check_release`), or the results would name another.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.results import REASON_ENGINE_MISMATCH
from ftbench.engines.fms_args import equivalent_command, sft_trainer_args
from ftbench.engines.releases import load_releases
from ftbench_trainer.engines.fms_api import parse, train
from ftbench_trainer.engines.run import EngineRun

log = logging.getLogger(__name__)


class EngineMismatchError(RuntimeError):
    """The environment holds another fms-hf-tuning release than the experiment asks for."""

    reason = REASON_ENGINE_MISMATCH


def installed_release() -> str:
    try:
        return version("fms-hf-tuning")
    except PackageNotFoundError:
        return ""


def check_release(plan: LaunchPlan) -> str:
    """The installed release; raises unless it is the requested one (or the plan allows another)."""
    installed, wanted = installed_release(), plan.engine_version
    if installed == wanted or (installed and plan.allow_engine_mismatch):
        return installed
    carries = f"fms-hf-tuning {installed}" if installed else "no fms-hf-tuning"
    raise EngineMismatchError(
        f"engine: the image carries {carries}, the experiment asks for {wanted}; run it with the trainer image "
        f"tagged fms-hf-tuning-{wanted} (Dockerfile.trainer --build-arg FMS_HF_TUNING_VERSION={wanted}), "
        "or set fmsHfTuningVersion to the release the image carries"
    )


def _args(plan: LaunchPlan, run: EngineRun) -> list[str]:
    """The command line of the release that runs (it differs from the plan's only if the plan allows it)."""
    plan = plan.model_copy(update={"engine_version": check_release(plan)})
    return sft_trainer_args(plan, dataset_path=run.dataset_path, model_path=run.model_path)


def command_for(run: EngineRun, accelerate_config: str | None = None) -> str:
    return equivalent_command(run.plan, _args(run.plan, run), accelerate_config)


def run_fms(run: EngineRun) -> str:
    train_fms(run, [run.callback])
    return installed_release()


def train_fms(run: EngineRun, callbacks: list[Any]) -> Any:
    """The release's `train` on the seed's arguments with `callbacks`; returns the trainer."""
    from tuning import sft_trainer

    release = load_releases().get(check_release(run.plan))
    return train(sft_trainer, parse(sft_trainer, release.api, _args(run.plan, run)), callbacks)
