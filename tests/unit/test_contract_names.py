"""Names that cross a process boundary are spelled once, in ftbench/contracts.

Python code imports them (`ftbench.contracts.env`, `.labels`, `.progress`), so a rename there
reaches every reader. The Helm chart, the Dockerfiles and the shell scripts cannot import Python:
these tests check that every name they spell is one the contracts define, and that no Python
module outside ftbench/contracts spells one by hand again.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ftbench.contracts import env, labels
from ftbench_operator.settings import OperatorSettings

REPO = Path(__file__).resolve().parents[2]
CONTRACTS = REPO / "ftbench" / "contracts"
PACKAGES = ("ftbench", "operator", "trainer-image", "bench")

ENV_NAME = re.compile(r"\bFTBENCH_[A-Z0-9_]+")
LABEL_KEY = re.compile(r"\bftbench\.io/[a-z][a-z0-9.-]*")
# A string that is a cross-process name by itself (a name spelled in prose is documentation).
NAME_LITERAL = re.compile(r"(FTBENCH_[A-Z0-9_]+|HF_HOME|ftbench\.io/[a-z][a-z0-9.-]*|app\.kubernetes\.io/managed-by)")
# ftbench.io/... strings that are not labels or annotations: the API version (ftbench.api.resource
# spells it in a Literal type) and the field manager of TrainJob runtime patches (ftbench.render.trainjob).
NOT_LABELS = {"ftbench.io/v1alpha1", "ftbench.io/operator"}
# Knobs a shell script reads for itself (no other process reads them).
SCRIPT_ONLY = {"FTBENCH_FORCE", "FTBENCH_TEST_WORKERS"}  # read by hack/setup-envs.sh and hack/test.sh alone


def _constants(module: object) -> set[str]:
    return {v for k, v in vars(module).items() if k.isupper() and isinstance(v, str)}


ENV_NAMES = _constants(env) | {env.operator_setting(f) for f in OperatorSettings.model_fields}
LABEL_KEYS = _constants(labels)


def _python_files() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if CONTRACTS not in path.parents:
                yield path


def _name_literals(path: Path) -> Iterator[tuple[int, str]]:
    """String constants (docstrings excepted) that are exactly a cross-process name."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        literal = isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        if literal and NAME_LITERAL.fullmatch(node.value.strip()):
            yield node.lineno, node.value


def test_python_imports_cross_process_names_from_contracts() -> None:
    spelled = [
        f"{path.relative_to(REPO)}:{line}: {value!r}"
        for path in _python_files()
        for line, value in _name_literals(path)
        if value not in NOT_LABELS
    ]
    assert not spelled, "import these from ftbench.contracts (env, labels, progress) instead:\n" + "\n".join(spelled)


def _non_python() -> list[Path]:
    return [
        *sorted((REPO / "helm" / "ftbench" / "templates").iterdir()),
        *sorted(REPO.glob("Dockerfile*")),
        *sorted((REPO / "hack").glob("*.sh")),
    ]


@pytest.mark.parametrize("path", _non_python(), ids=lambda p: str(p.relative_to(REPO)))
def test_chart_dockerfiles_and_scripts_spell_contract_names(path: Path) -> None:
    text = path.read_text()
    unknown_env = set(ENV_NAME.findall(text)) - ENV_NAMES - SCRIPT_ONLY
    unknown_labels = set(LABEL_KEY.findall(text)) - LABEL_KEYS - NOT_LABELS
    assert not unknown_env, f"{path.name}: not in ftbench.contracts.env: {sorted(unknown_env)}"
    assert not unknown_labels, f"{path.name}: not in ftbench.contracts.labels: {sorted(unknown_labels)}"


def test_admission_policy_checks_the_managed_by_label() -> None:
    """The chart lets the operator touch only objects with the labels the renderer puts on them."""
    policy = (REPO / "helm" / "ftbench" / "templates" / "admission-policy.yaml").read_text()
    assert f"'{labels.EXPERIMENT_LABEL}' in variables.labels" in policy
    assert f"variables.labels['{labels.MANAGED_BY_LABEL}'] == '{labels.APP_NAME}'" in policy


def test_chart_sets_the_settings_the_operator_reads() -> None:
    deployment = (REPO / "helm" / "ftbench" / "templates" / "deployment.yaml").read_text()
    assert f"- name: {env.POD_NAMESPACE}" in deployment
    assert {n for n in ENV_NAME.findall(deployment) if n != env.OPERATOR_SETTINGS_PREFIX} <= ENV_NAMES


def test_profile_config_map_carries_the_profile_label() -> None:
    config_map = (REPO / "helm" / "ftbench" / "templates" / "configmap-profile.yaml").read_text()
    assert f'{labels.PROFILE_LABEL}: "true"' in config_map
