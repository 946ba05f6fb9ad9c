"""The CLI's foundation commands, run in-process through `main()`."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import yaml

from ftbench.api.crd import crd_yaml, sweep_crd
from ftbench.cli import main

GOOD = """apiVersion: ftbench.io/v1alpha1
kind: FineTuneExperiment
metadata: {name: good}
spec: {model: llama3.1-8b, modelMaxLength: 2048, numberGpus: 2, batchSize: 4, gpuModel: NVIDIA-A100-SXM4-80GB}
"""
BAD = """apiVersion: ftbench.io/v1alpha1
kind: FineTuneExperiment
metadata: {name: bad}
spec: {model: llama3.1-8b, modelMaxLength: 2048, numberGpus: 2, batchSize: 3, gpuModel: X}
"""


def test_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, both = tmp_path / "good.yaml", tmp_path / "both.yaml"
    good.write_text(GOOD)
    both.write_text(GOOD + "---\n" + BAD)
    assert main(["validate", str(good)]) == 0
    assert main(["validate", str(both)]) == 1
    out = capsys.readouterr().out
    assert "both.yaml#2: bad: invalid" in out and "spec.batchSize (value: 3)" in out and "[is_valid.1]" in out


def test_validate_states_the_batch_and_warns_about_roce_without_a_network(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 28 items 5 and 6: batchSize is ado's per-pass batch, so validate spells out per device,
    accumulation and global batch; a multi-node enableRoce run on a profile that describes no RoCE is
    valid but warned about (it runs on what the nodes have), and the RoCE profile silences the warning.
    With run.requireRoce (the example's) it is refused on that profile instead (issue 44.3)."""
    example = Path("examples/multi-node-roce.yaml")
    assert main(["validate", str(example), "--profile", "examples/profiles/roce-cluster.yaml"]) == 0
    out = capsys.readouterr().out
    assert "batch: 1 per device x 16 device(s) x 4 accumulation step(s) = 64 samples per optimizer step" in out
    assert "warning" not in out
    assert main(["validate", str(example)]) == 1
    assert "[profile.no-roce]" in capsys.readouterr().out
    lenient = tmp_path / "roce.yaml"
    lenient.write_text(example.read_text().replace("    requireRoce: true\n", ""))
    assert main(["validate", str(lenient)]) == 0
    assert "warning: enableRoce is true but the cluster profile describes no RoCE" in capsys.readouterr().out
    assert main(["validate", "-q", str(lenient)]) == 0
    assert "warning: enableRoce" in capsys.readouterr().out  # quiet still prints warnings


def test_validate_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed\n")
    assert main(["validate", str(broken)]) == 2
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_catalog_tables(capsys: pytest.CaptureFixture[str]) -> None:
    for what, needle in (
        ("models", "mixtral-8x7b-instruct-v0.1"),
        ("experiments", "finetune_pt_benchmark-v1.0.0"),
        ("datasets", "news-chars-512-entries-4096"),
    ):
        assert main(["catalog", what]) == 0
        assert needle in capsys.readouterr().out


def test_crd_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    printed = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["spec"]["names"]["kind"] for d in printed] == ["FineTuneExperiment", "FineTuneSweep"]
    assert main(["crd", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "ftbench.io_finetuneexperiments.yaml").read_text() == crd_yaml()
    assert (tmp_path / "ftbench.io_finetunesweeps.yaml").read_text() == crd_yaml(document=sweep_crd())


def test_catalog_models_fits_a_terminal_and_wide_json_yaml_have_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    from ftbench.catalog import load_catalog

    catalog = load_catalog()
    assert main(["catalog", "models"]) == 0
    table = capsys.readouterr().out
    assert max(len(line) for line in table.splitlines()) <= 132  # a terminal, not hundreds of columns
    assert all(m.name in table for m in catalog.models.values())
    assert main(["catalog", "models", "-o", "wide"]) == 0
    wide = capsys.readouterr().out
    assert all(m.weights.vanilla in wide for m in catalog.models.values() if m.weights.vanilla)
    assert main(["catalog", "models", "-o", "json"]) == 0
    assert {m["name"] for m in json.loads(capsys.readouterr().out)} == {m.name for m in catalog.models.values()}
    assert main(["catalog", "datasets", "-o", "yaml"]) == 0
    assert {d["name"] for d in yaml.safe_load(capsys.readouterr().out)} == {d.name for d in catalog.datasets.values()}


def _commands() -> list[list[str]]:
    from ftbench.cli.main import COMMAND_MODULES

    return [[], *([m.rsplit("cmd_", 1)[1]] for m in COMMAND_MODULES)]


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c) or "ftbench")
def test_help_names_the_engines_runtimes_and_examples(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from ftbench.cli.picks import EXAMPLES_DIR
    from ftbench.contracts.enums import Engine, Runtime

    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = capsys.readouterr().out
    assert all(e.value in text for e in Engine) and all(r.value in text for r in Runtime)
    named = set(re.findall(r"examples/([\w.-]+\.yaml)", text))
    assert named == {p.name for p in EXAMPLES_DIR.glob("*.yaml")} and "quickstart.yaml" in named


def test_dev_up_names_a_stop_command_that_parses(tmp_path: Path) -> None:
    """`ftbench dev up --state-dir` printed `ftbench dev down --state-dir DIR`, which argparse refuses."""
    import shlex

    from ftbench.cli.main import build_parser
    from ftbench_devcluster.devup import DEFAULT_STATE_DIR, stop_command

    for root in (DEFAULT_STATE_DIR, tmp_path / "dev"):
        args = build_parser().parse_args(shlex.split(stop_command(root))[1:])
        assert (args.action, args.state_dir or DEFAULT_STATE_DIR) == ("down", root)  # unset: the rig's default


def test_a_command_parses_with_its_own_parser_and_help_with_all(capsys: pytest.CaptureFixture[str]) -> None:
    """`ftbench predict FILE` builds the predict command's parser alone (a repeated predict spent a third of its time
    importing every command); --help, a plugin's command or a typo get the whole parser and its choices."""
    from ftbench.cli.main import build_parser

    only = build_parser(["predict", "x.yaml"])
    assert only.parse_args(["predict", "x.yaml"]).command == "predict"
    assert _subcommands(only) == {"predict"}
    assert {"predict", "validate", "run", "sweep", "dev"} <= _subcommands(build_parser(["predict", "--help"]))
    with pytest.raises(SystemExit):
        main(["no-such-command"])
    assert "invalid choice" in capsys.readouterr().err


def _subcommands(parser: argparse.ArgumentParser) -> set[str]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(action.choices)
