"""The trainer arguments we render are ones each fms-hf-tuning release's own parser takes.

For every offered release, the command line is built here (main env) from each render case's
plan asking for that release (cases validation refuses for it are left out: they never reach a
trainer), then parsed in that release's environment (ftbench engines) with the parser
`tuning.sft_trainer.main` uses: `get_parser()` + `parse_arguments()`, bound to the names of the
release's API class (`ftbench_trainer.engines.fms_api`). HfArgumentParser silently returns flags it
does not know as "remaining strings" (and `parse_arguments` drops them), so the check also parses
with `return_remaining_strings=True` and requires nothing left over. A second test holds the API
classes against each release's own source.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ftbench.api.validation import validate_spec_dict
from ftbench.contracts.plan import LaunchPlan
from ftbench.engines.envs import package_path
from ftbench.engines.flags import RENDERED_FLAGS, known_flags
from ftbench.engines.fms_args import sft_trainer_args
from ftbench.engines.releases import load_releases
from tests.trainer.helpers import fms_env_python
from tests.unit.render_cases import CASES, Case

pytestmark = pytest.mark.fms

RELEASES = load_releases()
DATASET = "/data/fms-hf-tuning/artificial-dataset/news.jsonl"

PARSE_SCRIPT = r"""
import contextlib, io, json, multiprocessing, sys
from tuning import sft_trainer
from ftbench_trainer.engines import fms_api

API = sys.argv[1]


def leftover(args):
    return sft_trainer.get_parser().parse_args_into_dataclasses(args=args, return_remaining_strings=True)[-1]


def parsed(args):
    p = fms_api.parse(sft_trainer, API, args)
    model, training, tune, qlora = p["model_args"], p["training_args"], p["tune_config"], p["quantized_lora_config"]
    return {
        "model": model.model_name_or_path,
        "per_device_train_batch_size": training.per_device_train_batch_size,
        "max_steps": training.max_steps,
        "tune": type(tune).__name__,
        "target_modules": sorted(getattr(tune, "target_modules", None) or []),
        "auto_gptq_kernel": getattr(getattr(qlora, "auto_gptq", None), "kernel", None),
        "fp16": training.fp16,
        # What sft_trainer loads the model with (None: transformers' default, sdpa).
        "attention": getattr(model, "flash_attn_implementation", "flash_attention_2") if model.use_flash_attn else "sdpa",
    }


def run(task):
    name, what, args = task
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return name, what, {"leftover": leftover, "parsed": parsed}[what](args)
    except BaseException as exc:  # argparse exits on a rejected flag
        return name, "error", f"{type(exc).__name__}: {exc}: {err.getvalue()[-600:]}"


if __name__ == "__main__":
    # fms-acceleration's list casters (EnsureTypes) are class-level and stateful: one parse per
    # process, as in sft_trainer itself. Each task runs in a worker forked before any parse.
    tasks = [(n, w, a) for n, a in json.load(sys.stdin).items() for w in ("leftover", "parsed")]
    # Every flag the release's parser has, for the generated fms-flags.yaml check (one import per release).
    out = {"__flags__": sorted({s for a in sft_trainer.get_parser()._actions for s in a.option_strings})}
    with multiprocessing.get_context("fork").Pool(4, maxtasksperchild=1) as pool:
        for name, what, value in pool.imap_unordered(run, tasks):
            out.setdefault(name, {})[what] = value
    print(json.dumps(out))
"""


def _in_env(release: str, script: str, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(fms_env_python(release)), "-c", script, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=Path("/"),
        env={**os.environ, "PYTHONPATH": package_path()},
    )


def _parse_in_fms_env(release: str, cases: dict[str, list[str]]) -> dict[str, dict]:
    proc = _in_env(release, PARSE_SCRIPT, json.dumps(cases), RELEASES.get(release).api)
    assert proc.returncode == 0, f"fms-hf-tuning {release} rejected the arguments:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cases_for(release: str) -> dict[str, LaunchPlan]:
    """Every render case asking for `release` that validation lets through (with the engine fms-hf-tuning),
    and the first one with each explicit attention implementation the release can load."""
    plans = {}
    attention = [(f"{CASES[0].name}-{a}", {**CASES[0].spec, "attentionImplementation": a}, CASES[0].profile)
                 for a in ("eager", "sdpa", "flash_attention_2")]  # fmt: skip
    for name, case_spec, profile in [*((c.name, c.spec, c.profile) for c in CASES), *attention]:
        spec = {**case_spec, "engine": "fms-hf-tuning", "fmsHfTuningVersion": release}
        if validate_spec_dict(spec).ok:
            plans[name] = Case(name, spec, profile).render().plan
    return plans


@pytest.mark.parametrize("release", [r.version for r in RELEASES.installable])
def test_rendered_args_parse_with_each_release(release: str) -> None:
    plans = _cases_for(release)
    assert len(plans) >= len(CASES) - 2, f"validation refuses most cases for {release}: {sorted(plans)}"
    args = {name: sft_trainer_args(plan, dataset_path=DATASET) for name, plan in plans.items()}
    parsed = _parse_in_fms_env(release, args)
    parser_flags = set(parsed.pop("__flags__"))
    assert known_flags(release) == {f for f in RENDERED_FLAGS if f in parser_flags}, (
        "ftbench/engines/data/fms-flags.yaml is stale: run python -m ftbench.engines.flags"
    )
    for name, plan in plans.items():
        assert "error" not in parsed[name], f"{name}: fms-hf-tuning rejected {args[name]}: {parsed[name]['error']}"
        assert parsed[name]["leftover"] == [], f"{name}: flags fms-hf-tuning does not know: {parsed[name]['leftover']}"
        got = parsed[name]["parsed"]
        assert got["model"] == plan.model.ref
        assert got["per_device_train_batch_size"] == plan.topology.per_device_batch_size
        assert got["max_steps"] == plan.training.max_steps
        assert got["attention"] == plan.training.attn_implementation.value
        assert (
            got["tune"]
            == {"lora": "LoraConfig", "pt": "PromptTuningConfig", "none": "NoneType"}[plan.training.peft.method]
        )
        if plan.training.peft.target_modules:
            assert got["target_modules"] == sorted(plan.training.peft.target_modules)
        if plan.training.auto_gptq:
            assert got["auto_gptq_kernel"] == plan.training.auto_gptq[0]
            assert got["fp16"] is True


API_SCRIPT = r"""
import ast, importlib.util, inspect, json, pathlib
spec = importlib.util.find_spec("tuning.sft_trainer")
tree = ast.parse(pathlib.Path(spec.origin).read_text())
out = {}
for fn in tree.body:
    if isinstance(fn, ast.FunctionDef) and fn.name in ("parse_arguments", "train"):
        returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)]
        out[fn.name] = {
            "params": [a.arg for a in fn.args.args + fn.args.kwonlyargs],
            "returns": [[ast.unparse(e) for e in r.value.elts] for r in returns],
        }
print(json.dumps(out))
"""


@pytest.mark.parametrize("release", [r.version for r in RELEASES.installable])
def test_api_class_matches_the_release_source(release: str) -> None:
    """The names `fms_api` binds are the ones the release's own `parse_arguments` returns, and
    every keyword it passes to `train` is one the release's `train` takes."""
    from ftbench_trainer.engines.fms_api import NOT_PASSED, PARSE_RETURNS, TRAIN_KEYWORDS

    proc = _in_env(release, API_SCRIPT, "")
    assert proc.returncode == 0, proc.stderr[-3000:]
    source = json.loads(proc.stdout.strip().splitlines()[-1])
    names = PARSE_RETURNS[RELEASES.get(release).api]
    assert source["parse_arguments"]["returns"] == [list(names)]
    params = set(source["train"]["params"])
    passed = {TRAIN_KEYWORDS.get(n, n) for n in names if n not in NOT_PASSED} & params
    assert {"tracker_configs", "additional_callbacks"} <= params  # the adapter always passes these two
    assert {"model_args", "data_args", "train_args", "peft_config"} <= passed
    assert {n for n in names if n.endswith("_config") and TRAIN_KEYWORDS.get(n, n) not in passed} <= {
        "file_logger_config", "aim_config", "mlflow_config", "hf_resource_scanner_config", "quantization_config"
    }  # fmt: skip  # 2.x trackers go through TrackerConfigFactory; quantization_config only where train takes it
