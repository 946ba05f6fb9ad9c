"""`ftbench run` and `ftbench results`: real training of the tiny model on CPU, and Ctrl-C."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftbench.api.repeats import repeats_status
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.cli import main
from ftbench.contracts.results import Outcome, TrainerResult
from ftbench.engines.envs import list_envs, package_path
from ftbench.engines.releases import load_releases
from ftbench.local.home import local_profile
from ftbench.local.runner import LocalRunError, TrainerPython, execute, prepare, trainer_profile, trainer_python
from ftbench.local.store import ResultsStore
from tests.local.terminal import foreground

EXPERIMENT = """apiVersion: ftbench.io/v1alpha1
kind: FineTuneExperiment
metadata: {{name: {name}}}
spec:
  experiment: finetune_lora_benchmark-v1.0.0
  engine: trl
  model: ftbench-tiny-llama
  datasetId: news-chars-512-entries-4096
  modelMaxLength: 256
  numberGpus: 0
  batchSize: 2
  gradientAccumulationSteps: 1
  maxSteps: {steps}
"""


def spec(**overrides: object) -> FineTuneExperimentSpec:
    base = {"model": "ftbench-tiny-llama", "modelMaxLength": 64, "numberGpus": 0, "batchSize": 2}
    return FineTuneExperimentSpec.model_validate({**base, **overrides})


def test_multi_node_and_missing_gpus_are_refused(home: Path) -> None:
    catalog, profile = load_catalog(), local_profile(home=home)
    with pytest.raises(LocalRunError, match="multi-node runs need a cluster"):
        prepare(spec(numberNodes=2), "x", catalog, profile, home, gpus_available=0)
    with pytest.raises(LocalRunError, match="this machine has 0 usable GPU"):
        prepare(spec(numberGpus=2, batchSize=2, gpuModel="G"), "x", catalog, profile, home, gpus_available=0)


def test_auto_attention_on_a_gpu_is_what_the_local_trainer_can_import(home: Path, tmp_path: Path) -> None:
    """The profile says the images carry flash-attn; a machine's own trainer may not (a laptop, the lent
    H200): auto then plans sdpa there rather than a run that dies importing flash_attn, and an explicit
    flash_attention_2 is refused with the reason before anything starts."""
    catalog, profile = load_catalog(), local_profile(home=home)
    gpu = spec(numberGpus=1, gpuModel="NVIDIA-H200", batchSize=2)
    here = TrainerPython(sys.executable)  # this environment has no flash-attn
    assert importlib.util.find_spec("flash_attn") is None
    local = trainer_profile(profile, here)
    assert profile.flash_attention and not local.flash_attention
    plan = prepare(gpu, "x", catalog, local, home, gpus_available=1).plan
    assert plan.training.attn_implementation.value == "sdpa"
    with pytest.raises(LocalRunError, match="cannot import flash_attn"):
        prepare(spec(numberGpus=1, gpuModel="G", batchSize=2, attentionImplementation="flash_attention_2"), "x",
                catalog, local, home, gpus_available=1)  # fmt: skip
    # An interpreter that has it (here: a flash_attn package on its PYTHONPATH) keeps the profile's.
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    assert trainer_profile(profile, TrainerPython(sys.executable, str(tmp_path))) is profile
    plan = prepare(gpu, "x", catalog, profile, home, gpus_available=1).plan
    assert plan.training.attn_implementation.value == "flash_attention_2"


def test_local_ranks_meet_on_a_free_port(home: Path) -> None:
    """Two local runs side by side must not both take the profile's 29500."""
    catalog, profile = load_catalog(), local_profile(home=home)
    ranks = spec(numberGpus=2, device="cpu", distributedBackend="FSDP")
    a, b = (prepare(ranks, n, catalog, profile, home, gpus_available=0).plan for n in ("a", "b"))
    assert a.rendezvous.port != profile.master_port and a.rendezvous.port != b.rendezvous.port
    assert (a.accelerate_config or {})["main_process_port"] == a.rendezvous.port


def test_each_fms_release_gets_its_own_environment(tmp_path: Path) -> None:
    """trl runs here; fms-hf-tuning in its release's environment, with ftbench's packages on PYTHONPATH."""
    assert trainer_python(spec(engine="trl")).path == sys.executable
    explicit = trainer_python(spec(engine="fms-hf-tuning"), str(tmp_path / "py"))
    assert explicit.path == str(tmp_path / "py") and explicit.pythonpath == package_path()
    with pytest.raises(LocalRunError, match=r"3\.0\.0\.1 cannot be installed: 3\.0\.0\.1 is not a published release"):
        trainer_python(spec(engine="fms-hf-tuning", fmsHfTuningVersion="3.0.0.1"))


@pytest.mark.training
@pytest.mark.fms
def test_run_builds_the_default_release_environment_on_first_use(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's default experiment engine (fms-hf-tuning, default release) just works locally: the
    first `ftbench run` builds that release's environment (a fresh cache here) and says so."""
    monkeypatch.setenv("FTBENCH_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "fms.yaml"
    path.write_text(EXPERIMENT.format(name="fms-local", steps=2).replace("engine: trl", "engine: fms-hf-tuning"))
    assert main(["run", str(path), "-o", "json", "--dataset-entries", "16"]) == 0
    out, err = capsys.readouterr()
    default = load_releases().default
    assert f"building the fms-hf-tuning {default} environment" in err
    result = TrainerResult.model_validate(json.loads(out))
    assert result.outcome == Outcome.SUCCEEDED and result.environment is not None
    assert result.environment.engine_version == default
    assert [e.release for e in list_envs()] == [default]


def test_plan_storage_moves_under_home(home: Path) -> None:
    run = prepare(spec(), "x", load_catalog(), local_profile(home=home), home, gpus_available=0)
    assert run.plan.model.ref == str(home / "models" / "ftbench-tiny-llama")
    assert run.plan.data_dir == str(home / "data")
    assert run.plan.output.termination_message_path.startswith(str(run.run_dir))
    assert json.loads(run.plan_path.read_text())["experimentRef"]["name"] == "x"


def test_store_round_trip_and_exports(home: Path) -> None:
    from datetime import UTC, datetime

    store = ResultsStore(home / "results.db")
    store.record(run_id="r1", name="a", spec=spec(), started_at=datetime.now(UTC), status="Failed",
                 results=[TrainerResult(outcome=Outcome.FAILED)], run_dir=home)  # fmt: skip
    [run] = store.runs()
    assert (run.status, run.is_valid, run.results[0]["outcome"]) == ("Failed", None, "Failed")
    assert store.export("csv").splitlines()[1].startswith("r1,a,")
    assert json.loads(store.export("json"))[0]["spec"]["model"] == "ftbench-tiny-llama"
    [ado] = json.loads(store.export("json", names="ado"))
    assert ado["is_valid"] is None and ado["train_tokens_per_second"] is None  # a failed run has no metrics
    assert ado["model_name"] == "ftbench-tiny-llama" and ado["number_gpus"] == 0
    assert (ado["ftbench_run_id"], ado["ftbench_status"]) == ("r1", "Failed")  # told apart from measured rows


@pytest.mark.training
def test_run_trains_prints_and_stores(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("trl")
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.format(name="local", steps=6))
    assert main(["run", str(path), "-o", "json", "--quiet", "--dataset-entries", "32"]) == 0
    out, err = capsys.readouterr()
    result = TrainerResult.model_validate(json.loads(out))  # stdout is the JSON alone
    assert "step " not in err and "next:" not in err and "batch:" not in err  # --quiet: no guide on stderr
    assert result.outcome == Outcome.SUCCEEDED and result.metrics is not None
    assert result.metrics.train_steps == 6 and result.metrics.train_tokens > 0
    assert main(["results"]) == 0
    assert "local" in capsys.readouterr().out
    [stored] = ResultsStore(home / "results.db").runs()
    assert stored.status == "Succeeded" and stored.train_tokens_per_second == result.metrics.train_tokens_per_second
    assert result.environment is not None and result.environment.dataset_generated
    assert result.environment.dataset_file.startswith(str(home / "data" / "news-chars-512-entries-4096-"))
    # ado's property names, for analyses written against ado's actuator
    assert main(["results", "--export", "csv", "--names", "ado"]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    named = dict(zip(header.split(","), row.split(","), strict=True))
    assert named["experiment_id"] == "finetune_lora_benchmark-v1.0.0" and named["is_valid"] == "True"
    assert float(named["train_tokens_per_second"]) == result.metrics.train_tokens_per_second
    assert float(named["gpu_power_watts_min"]) == 0.0 and named["model_name"] == "ftbench-tiny-llama"
    # ado's cpu_memory_utilization column carries seed note 2's process figure; the node's, ado's
    # quantity, is measured beside it and exported under ftbench's own name.
    m = result.metrics
    assert 0 < m.cpu_memory_utilization_percent <= m.node_memory_used_percent < 100
    assert float(named["cpu_memory_utilization"]) == m.cpu_memory_utilization_percent
    assert float(named["ftbench_node_memory_used_percent"]) == m.node_memory_used_percent
    assert (named["ftbench_status"], named["ftbench_engine"], named["fms_hf_tuning_version"]) == (
        "Succeeded",
        "trl",
        "",
    )
    assert named["ftbench_run_id"] == stored.id and named["ftbench_engine_version"] == result.environment.engine_version


def test_repeats_run_in_fresh_processes_and_report_across_them(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("trl")
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.format(name="repeated", steps=6) + "  repeats: 2\n  warmupSteps: 2\n")
    assert main(["run", str(path), "--dataset-entries", "32"]) == 0
    out, err = capsys.readouterr()
    assert "2 repeats (each in a fresh process)" in err
    assert re.search(r"across repeats: mean [\d,]+ tokens/s \(95% CI [\d,]+-[\d,]+, CV [\d.]+%\)", out), out
    [stored] = ResultsStore(home / "results.db").runs()
    results = [TrainerResult.model_validate(r) for r in stored.results]
    assert stored.status == "Succeeded" and [r.trial for r in results] == [0, 1]
    assert all(r.metrics and (r.metrics.warmup_steps, r.metrics.measured_steps) == (2, 4) for r in results)
    tps = [r.metrics.train_tokens_per_second for r in results if r.metrics]
    assert stored.train_tokens_per_second == pytest.approx(sum(tps) / 2)  # the headline is their mean
    # two trainer processes, one after another: each printed its own result into the one log
    assert (stored_log := Path(stored.run_dir) / "trainer.log").read_text().count("FTBENCH_RESULT ") == 2, stored_log


def test_repeats_and_runs_stop_at_the_precision_target(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """targetPrecisionPercent ends each repeat's measured window once its interval is tight (long before its
    400-step budget), and the repeats once the interval across them is: a third repeat runs exactly when
    the first two disagree by more than the target allows (the machine decides which; both are checked)."""
    pytest.importorskip("trl")
    path = tmp_path / "exp.yaml"
    extra = "  repeats: 3\n  warmupSteps: 2\n  targetPrecisionPercent: 30\n  precisionMinSteps: 6\n"
    path.write_text(EXPERIMENT.format(name="precise", steps=400) + extra + "  precisionMinSeconds: 0\n")
    assert main(["run", str(path), "--dataset-entries", "32"]) == 0
    out, _ = capsys.readouterr()
    [stored] = ResultsStore(home / "results.db").runs()
    results = [TrainerResult.model_validate(r) for r in stored.results]
    assert all(r.metrics and r.metrics.stopped_by == "precisionTarget" for r in results), out
    assert all(r.metrics and r.metrics.train_steps < 400 for r in results)
    first_two = repeats_status(3, results[:2], 0.30)
    assert first_two.ci95_high is not None and first_two.mean
    tight = (first_two.ci95_high - first_two.mean) / first_two.mean <= 0.30
    assert len(results) == (2 if tight else 3), out
    assert ("2 of 3 repeats ran: the interval across them reached the target" in out) == tight, out


@pytest.mark.training
def test_progress_arrives_while_the_trainer_runs_with_tqdm_drawing(home: Path) -> None:
    """tqdm redraws its bar with carriage returns on the trainer's stderr, which `ftbench run` keeps
    in the run's log; progress travels through the run's own event file, so every update arrives
    whole, while the trainer runs: the run has 100000 steps and ends only because the second update
    stops it (as Ctrl-C would)."""
    pytest.importorskip("trl")
    run_spec = spec(experiment="finetune_lora_benchmark-v1.0.0", engine="trl", datasetId="news-chars-512-entries-4096",
                    modelMaxLength=256, gradientAccumulationSteps=1, maxSteps=100000)  # fmt: skip
    run = prepare(run_spec, "bar", load_catalog(), local_profile(home=home), home, dataset_entries=32, gpus_available=0)
    seen: list[dict[str, float | int]] = []

    def on_progress(progress: dict[str, float | int]) -> None:
        seen.append(progress)
        if len(seen) == 2:
            raise KeyboardInterrupt

    outcome = execute(run, trainer_python(run_spec), on_progress=on_progress)
    assert outcome.status == "Interrupted", run.log_path.read_text()[-3000:]
    assert "%|" in run.log_path.read_text(), "tqdm did not draw: the test would not exercise the mixed output"
    assert [p["totalSteps"] for p in seen] == [100000, 100000]
    assert 0 < seen[0]["step"] < seen[1]["step"] and seen[1]["tokensPerSecond"] > 0


@pytest.mark.training
def test_a_first_run_is_guided(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28 item 7: the accepted spec first (model, engine, ranks, batch, steps), progress with
    tokens/s while it trains, the results table, then the commands to try next."""
    pytest.importorskip("trl")
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.format(name="guided", steps=4))
    assert main(["run", str(path), "--dataset-entries", "32"]) == 0
    out, err = capsys.readouterr()
    [stored] = ResultsStore(home / "results.db").runs()
    assert f"run {stored.id}: guided (finetune_lora_benchmark-v1.0.0)" in err
    assert "model ftbench-tiny-llama, engine trl, 1 rank(s) on CPU, 4 steps" in err
    assert "batch: 2 per device x 1 device(s) x 1 accumulation step(s) = 2 samples per optimizer step" in err
    assert re.search(r"step 4/4 .* tokens/s", err), err  # the progress bar's last line
    assert "train tokens/s per GPU" in out and "outcome" in out  # the results table
    assert err.index("step 4/4") < err.index("next:")
    assert f"ftbench results compare RUN {stored.id}" in err and "ftbench report -o report/" in err


@pytest.mark.training
def test_ctrl_c_stops_the_run_cleanly(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("trl")
    path = tmp_path / "long.yaml"
    path.write_text(EXPERIMENT.format(name="long", steps=100000))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftbench", "run", str(path), "--dataset-entries", "32"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(), preexec_fn=foreground,
    )  # fmt: skip
    runs = home / "runs"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # wait until the trainer is stepping
        logs = list(runs.glob("*/trainer.log"))
        if logs and "FTBENCH_PROGRESS" in logs[0].read_text():
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the trainer never reported progress")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    [stored] = ResultsStore(home / "results.db").runs()
    assert stored.status == "Interrupted"
    leftover = subprocess.run(["pgrep", "-f", str(runs)], capture_output=True, text=True).stdout.strip()
    assert not leftover, f"trainer processes left behind: {leftover}"


def test_real_results_validate_against_the_published_schemas(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48.3: a real run's result, its metrics (status.results) and `ftbench results --export json`
    validate against docs/reference/schemas/, which `ftbench docs` generates from the models."""
    pytest.importorskip("trl")
    import jsonschema

    from ftbench.contracts.export import EXPORT_SCHEMA_VERSION
    from ftbench.contracts.results import RESULT_SCHEMA_VERSION

    schemas = Path(__file__).resolve().parents[2] / "docs" / "reference" / "schemas"

    def check(document: object, name: str) -> None:
        schema = json.loads((schemas / name).read_text())
        jsonschema.Draft202012Validator(schema).validate(document)

    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.format(name="schema", steps=3))
    assert main(["run", str(path), "-o", "json", "--quiet", "--dataset-entries", "32"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["schemaVersion"] == RESULT_SCHEMA_VERSION and result["outcome"] == "Succeeded"
    check(result, "result.v1.schema.json")
    check(result["metrics"], "metrics.v1.schema.json")
    assert main(["results", "--export", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert [r["schema_version"] for r in exported] == [EXPORT_SCHEMA_VERSION]
    check(exported, "export-list.v1.schema.json")
    broken = [{**exported[0], "results": [{**result, "outcome": "Sideways"}]}]
    with pytest.raises(jsonschema.ValidationError):
        check(broken, "export-list.v1.schema.json")
