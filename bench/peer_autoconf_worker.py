"""The peer's side of bench/peer_autoconf.py: ado-autoconf 2.1.2's two AutoGluon models, trained per held-out split.

    /root/.cache/ftbench/peer-autoconf/bin/python bench/peer_autoconf_worker.py IN.json OUT.json

Runs in the peer's own environment (bench/peer_autoconf_env.sh: AutoGluon 1.6.3 as ado-autoconf 2.1.2 pins it),
never in ftbench's. It imports only pandas, AutoGluon and the standard library. bench/peer_autoconf.py writes IN.json
(the rows, each with its features, its label or target and its part of every split) and reads OUT.json back.

ado-autoconf's training functions read its Hugging Face CSV and have no time limit, so they are not called: their
features, labels, filters and AutoGluon settings are restated here (from ado_autoconf-2.1.2's source):

- OOM classifier (autoconf/utils/autoconf_build/ml_classifier.py: COLS_TO_USE, TARGET, DEFAULT_PRESET_QUALITY,
  fit_tabular_predictor, filter_valid_with_hard_logic): label `is_valid` over model_name, method, number_gpus,
  gpu_model, tokens_per_sample, batch_size; rows whose batch is not divisible by the GPU count are dropped before
  fitting (autoconf/utils/rule_based_classifier.py, is_row_valid) and predicted invalid, as
  autoconf/utils/recommender.py's get_model_prediction_and_metadata answers them; presets ["medium_quality"],
  excluded_model_types ["GBM", "XGB"].
- Throughput regressor (autoconf/throughput_recommender.py: FEATURE_COLUMNS, TARGET, prepare_regression_data,
  build_regressor; autoconf/utils/autoconf_build/ml_classifier.py main): `dataset_tokens_per_second` over the same
  six features, rows that ran with a positive target and a batch divisible by the GPU count, duplicates dropped;
  problem_type regression, eval_metric root_mean_squared_error, excluded_model_types ["GBM"], num_bag_folds 5, and
  the preset `autoconf_build_model` passes (its --preset-quality, default "medium_quality"; the on-demand builder's
  own default is "good").

What differs, for a cheap run on shared cores: a `time_limit` per fit (ado's regressor: 900 s; its classifier: none),
bagged folds fitted one after another in this process (`fold_fitting_strategy` "sequential_local", no Ray), and
AutoGluon's output silenced. A training part with one class only predicts that class.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from autogluon.tabular import TabularDataset, TabularPredictor

FEATURES = ["model_name", "method", "number_gpus", "gpu_model", "tokens_per_sample", "batch_size"]
CLASSIFIER_TARGET = "is_valid"
REGRESSOR_TARGET = "dataset_tokens_per_second"
CLASSIFIER_FIT: dict[str, Any] = {"presets": ["medium_quality"], "excluded_model_types": ["GBM", "XGB"]}
REGRESSOR_FIT: dict[str, Any] = {"presets": "medium_quality", "excluded_model_types": ["GBM"], "num_bag_folds": 5}
CHEAP: dict[str, Any] = {"ag_args_ensemble": {"fold_fitting_strategy": "sequential_local"}, "verbosity": 0}


def divisible(frame: pd.DataFrame) -> pd.Series:
    """ado-autoconf's rule-based check: the global batch divides evenly over the GPUs."""
    return frame["batch_size"] % frame["number_gpus"] == 0


def fit_classifier(train: pd.DataFrame, path: Path, time_limit: float) -> TabularPredictor | int:
    train = train.loc[divisible(train), [*FEATURES, CLASSIFIER_TARGET]]
    labels = set(train[CLASSIFIER_TARGET])
    if len(labels) < 2:
        return int(labels.pop())
    return TabularPredictor(label=CLASSIFIER_TARGET, path=str(path), verbosity=0).fit(
        TabularDataset(train), time_limit=time_limit, **CLASSIFIER_FIT, **CHEAP
    )


def predict_classifier(model: TabularPredictor | int, test: pd.DataFrame) -> list[int]:
    rule = divisible(test)
    if isinstance(model, int):
        return [model if ok else 0 for ok in rule]
    predicted = model.predict(TabularDataset(test[FEATURES]))
    return [int(p) if ok else 0 for p, ok in zip(predicted, rule, strict=True)]


def fit_regressor(train: pd.DataFrame, path: Path, time_limit: float) -> TabularPredictor:
    keep = divisible(train) & (train[REGRESSOR_TARGET] > 0)
    train = train.loc[keep, [*FEATURES, REGRESSOR_TARGET]].drop_duplicates()
    return TabularPredictor(
        label=REGRESSOR_TARGET,
        problem_type="regression",
        eval_metric="root_mean_squared_error",
        path=str(path),
        verbosity=0,
    ).fit(TabularDataset(train), time_limit=time_limit, **REGRESSOR_FIT, **CHEAP)


def best_model(model: TabularPredictor | int) -> str:
    return "constant" if isinstance(model, int) else str(model.model_best)


def run(request: dict[str, Any]) -> dict[str, Any]:
    frames = {kind: pd.DataFrame(request[kind]) for kind in ("classifier", "regressor")}
    limits = {
        "classifier": float(request["time_limit_classifier"]),
        "regressor": float(request["time_limit_regressor"]),
    }
    out: dict[str, Any] = {"classifier": {}, "regressor": {}, "fits": []}
    scratch = Path(tempfile.mkdtemp(prefix="peer-autoconf-"))
    started = time.time()
    try:
        for split in request["splits"]:
            for kind, frame in frames.items():
                column = frame[f"split:{split}"]
                predictions: dict[str, float] = {}
                for part in sorted(set(column)):
                    held = column == part
                    path = scratch / f"{kind}-{len(out['fits'])}"
                    t0 = time.time()
                    if kind == "classifier":
                        model: TabularPredictor | int = fit_classifier(frame.loc[~held], path, limits[kind])
                        values: list[float] = [float(v) for v in predict_classifier(model, frame.loc[held])]
                    else:
                        model = fit_regressor(frame.loc[~held], path, limits[kind])
                        values = [float(v) for v in model.predict(TabularDataset(frame.loc[held, FEATURES]))]
                    predictions.update(zip((str(line) for line in frame.loc[held, "line"]), values, strict=True))
                    seconds = time.time() - t0
                    out["fits"].append(
                        {"split": split, "part": part, "kind": kind, "train_rows": int((~held).sum()),
                         "held_rows": int(held.sum()), "seconds": round(seconds, 1), "best_model": best_model(model)}
                    )  # fmt: skip
                    print(f"[{time.time() - started:6.0f} s] {split} / {part}: {kind} on {int((~held).sum())} rows, "
                          f"{seconds:.0f} s, best {best_model(model)}", file=sys.stderr, flush=True)  # fmt: skip
                    shutil.rmtree(path, ignore_errors=True)
                out[kind][split] = predictions
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    import autogluon.tabular

    out["autogluon"] = autogluon.tabular.__version__
    out["seconds"] = round(time.time() - started, 1)
    return out


def main() -> int:
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    target.write_text(json.dumps(run(json.loads(source.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
