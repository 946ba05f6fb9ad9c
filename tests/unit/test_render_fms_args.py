"""The trainer arguments we render are ones fms-hf-tuning's own parser takes.

The command line is built here (main env) from each render case's plan, then parsed in the
fms-hf-tuning environment (.venv-fms, made by hack/setup-envs.sh) with the parser
`tuning.sft_trainer.main` uses: `get_parser()` + `parse_arguments()`. HfArgumentParser silently
returns flags it does not know as "remaining strings" (and `parse_arguments` drops them), so
the check also parses with `return_remaining_strings=True` and requires nothing left over.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ftbench.contracts.fms_args import sft_trainer_args
from tests.unit.render_cases import CASES, REPO

pytestmark = pytest.mark.fms

FMS_PYTHON = REPO / ".venv-fms" / "bin" / "python"
DATASET = "/data/fms-hf-tuning/artificial-dataset/news.jsonl"

PARSE_SCRIPT = r"""
import contextlib, io, json, multiprocessing, sys
from tuning import sft_trainer


def leftover(args):
    return sft_trainer.get_parser().parse_args_into_dataclasses(args=args, return_remaining_strings=True)[-1]


def parsed(args):
    sys.argv = ["sft_trainer", *args]
    model, data, training, _, tune, _, qlora, *_ = sft_trainer.parse_arguments(sft_trainer.get_parser())
    return {
        "model": model.model_name_or_path,
        "per_device_train_batch_size": training.per_device_train_batch_size,
        "max_steps": training.max_steps,
        "tune": type(tune).__name__,
        "target_modules": sorted(getattr(tune, "target_modules", None) or []),
        "auto_gptq_kernel": getattr(getattr(qlora, "auto_gptq", None), "kernel", None),
        "fp16": training.fp16,
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
    out = {}
    with multiprocessing.get_context("fork").Pool(4, maxtasksperchild=1) as pool:
        for name, what, value in pool.imap_unordered(run, tasks):
            out.setdefault(name, {})[what] = value
    print(json.dumps(out))
"""


def _parse_in_fms_env(cases: dict[str, list[str]]) -> dict[str, dict]:
    if not FMS_PYTHON.exists():
        pytest.skip(f"{FMS_PYTHON} missing: create the fms-hf-tuning env with hack/setup-envs.sh fms")
    proc = subprocess.run(
        [str(FMS_PYTHON), "-c", PARSE_SCRIPT],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=Path("/"),
    )
    assert proc.returncode == 0, f"fms-hf-tuning rejected the arguments:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rendered_args_parse_with_fms_hf_tuning() -> None:
    plans = {c.name: c.render().plan for c in CASES}
    args = {name: sft_trainer_args(plan, dataset_path=DATASET) for name, plan in plans.items()}
    parsed = _parse_in_fms_env(args)
    for name, plan in plans.items():
        assert "error" not in parsed[name], f"{name}: fms-hf-tuning rejected {args[name]}: {parsed[name]['error']}"
        assert parsed[name]["leftover"] == [], f"{name}: flags fms-hf-tuning does not know: {parsed[name]['leftover']}"
        got = parsed[name]["parsed"]
        assert got["model"] == plan.model.ref
        assert got["per_device_train_batch_size"] == plan.topology.per_device_batch_size
        assert got["max_steps"] == plan.training.max_steps
        assert (
            got["tune"]
            == {"lora": "LoraConfig", "pt": "PromptTuningConfig", "none": "NoneType"}[plan.training.peft.method]
        )
        if plan.training.peft.target_modules:
            assert got["target_modules"] == sorted(plan.training.peft.target_modules)
        if plan.training.auto_gptq:
            assert got["auto_gptq_kernel"] == plan.training.auto_gptq[0]
            assert got["fp16"] is True
