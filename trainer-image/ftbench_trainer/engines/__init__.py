"""Training engines: each runs one training with `MeasureCallback` attached and the plan's settings.

`fms`: fms-hf-tuning's `tuning.sft_trainer.train` (its own environment, transformers 4.55 / trl
0.19); `trl`: current trl's `SFTTrainer`. Both see the same dataset file, model and
hyperparameters; the callback produces the same metrics from either.
"""

from __future__ import annotations

import os

from ftbench.contracts import env
from ftbench.contracts.enums import Engine
from ftbench_trainer.engines.run import EngineRun


def engine_command(run: EngineRun) -> str:
    """The bare command a user would run to train the same way (fms-hf-tuning only; '' for trl)."""
    if run.plan.engine == Engine.TRL:
        return ""
    from ftbench_trainer.engines.fms import command_for

    return command_for(run, os.environ.get(env.FTBENCH_ACCELERATE_CONFIG))


def run_engine(run: EngineRun) -> str:
    """Train; returns the engine's version string."""
    if run.plan.engine == Engine.TRL:
        from ftbench_trainer.engines.trl import run_trl

        return run_trl(run)
    from ftbench_trainer.engines.fms import run_fms

    return run_fms(run)
