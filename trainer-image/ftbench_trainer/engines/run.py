"""What an engine is given to train: the plan, where the model and the dataset are, and the
callback that measures. Its own module, so the engines and the dispatch in `__init__` do not
import each other."""

from __future__ import annotations

from dataclasses import dataclass

from ftbench.contracts.plan import LaunchPlan
from ftbench_trainer.measure.callback import MeasureCallback


@dataclass
class EngineRun:
    plan: LaunchPlan
    model_path: str
    dataset_path: str
    callback: MeasureCallback
