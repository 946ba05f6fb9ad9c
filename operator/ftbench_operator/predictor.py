"""Ask the predictor service for a plan's memory prediction (spec.run.oomPrecheck).

The operator's image has no torch; the chart's predictor (the trainer image running
`ftbench_trainer.predict.serve`) traces the step. A predictor that is not configured, not
reachable or cannot predict (no config.json at the model's path) is a `PredictorUnavailable` with
the reason: the run goes ahead without a prediction (condition MemoryFits=Unknown says why),
because refusing every run while a helper service is down would be worse than an unpredicted run.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import PREDICT_PATH, MemoryPrediction


class PredictorUnavailable(RuntimeError):
    """No prediction: the reason, in words."""


def _post(url: str, plan: LaunchPlan, timeout: float) -> MemoryPrediction:
    request = urllib.request.Request(
        url.rstrip("/") + PREDICT_PATH,
        data=plan.to_json().encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return MemoryPrediction.model_validate(json.loads(answer.read()))
    except urllib.error.HTTPError as err:
        try:
            detail = json.loads(err.read()).get("error", "")
        except (ValueError, AttributeError):
            detail = ""
        raise PredictorUnavailable(f"the predictor answered {err.code}: {detail or err.reason}") from err
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        raise PredictorUnavailable(f"the predictor at {url} is not reachable: {err}") from err
    except ValueError as err:
        raise PredictorUnavailable(f"the predictor's answer is not a prediction: {err}") from err


async def predict(url: str, plan: LaunchPlan, timeout: float) -> MemoryPrediction:
    return await asyncio.to_thread(_post, url, plan, timeout)
