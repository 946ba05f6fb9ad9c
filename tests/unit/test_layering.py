"""Which part of the code may import which: import-contract.toml, checked on the source.

The contract (the one source of the table in docs/architecture.md) lists, for each part, the other
parts and the third-party libraries it may import; `hack/import_contract.py` reads every import of
the four packages with `ast`, lazy ones too. What matters most for the images: ftbench (pydantic +
pyyaml) never imports the trainer or the operator, the operator never imports torch (its image has
none), the trainer never imports kopf (its image has none).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _contract() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_contract", REPO / "hack" / "import_contract.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_contract"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


contract = _contract()


def test_every_import_keeps_the_contract() -> None:
    assert contract.breaches() == []


def test_no_module_imports_itself_through_a_circle() -> None:
    assert contract.module_cycles() == []


def test_no_sub_package_imports_itself_through_a_circle() -> None:
    """Issue 43: the trainer's measure -> predict -> engines -> measure circle hid behind lazy imports."""
    assert contract.subpackage_cycles() == []
    # The check sees such a circle: two sub-packages that import each other, one of them inside a function.
    graph = {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert contract._cycles(graph) == [["pkg.a", "pkg.b"]]


def test_architecture_doc_shows_the_current_contract() -> None:
    assert contract.check_docs(), "docs/architecture.md is stale: run `python hack/import_contract.py --write`"


def test_the_arrows_the_images_need_are_in_the_contract() -> None:
    parts = contract.load()
    product = [p for key, p in parts.items() if key.startswith("ftbench")]
    assert all(not (p.libraries & {"torch", "transformers", "kopf"}) for p in product)
    assert all(not ({"trainer-image/ftbench_trainer", "operator/ftbench_operator"} & p.may_import) for p in product)
    assert "torch" not in parts["operator/ftbench_operator"].libraries
    assert "trainer-image/ftbench_trainer" not in parts["operator/ftbench_operator"].may_import
    assert "kopf" not in parts["trainer-image/ftbench_trainer"].libraries
    assert "operator/ftbench_operator" not in parts["trainer-image/ftbench_trainer"].may_import


def test_a_breach_is_found_and_named() -> None:
    """The check itself: take an arrow and a library away, and the imports that use them are named."""
    parts = contract.load()
    api = parts["ftbench/api"]
    parts["ftbench/api"] = dataclasses.replace(
        api, may_import=api.may_import - {"ftbench/stats"}, libraries=api.libraries - {"yaml"}
    )
    found = contract.breaches(parts)
    assert any(f.startswith("ftbench/api/") and "ftbench/api may not import ftbench/stats" in f for f in found)
    assert any("ftbench/api may not import the library yaml" in f for f in found)
    circle = contract.load()
    circle["ftbench/stats"] = dataclasses.replace(circle["ftbench/stats"], may_import=frozenset({"ftbench/api"}))
    assert "import-contract.toml: a circle of parts: ftbench/api -> ftbench/stats" in contract.breaches(circle)


def test_validation_rules_have_one_idiom() -> None:
    """Issue 43.4: a rule is stated on its check (`@family.rule(id, field, summary, cel=...)`), or built by a
    factory named `_..._rule` where one rule comes per catalog entry or setting; no container yields a Rule
    it builds inline."""
    import ast

    for path in sorted((REPO / "ftbench" / "api").glob("rules*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Yield) and isinstance(node.value, ast.Call):
                assert getattr(node.value.func, "id", None) != "Rule", f"{path.name}:{node.lineno}: yield Rule(...)"
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Rule":
                function = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                                and f.lineno <= node.lineno <= (f.end_lineno or 0) and f.name.endswith("_rule"))  # fmt: skip
                assert function.name.startswith("_"), (path.name, node.lineno)


PRODUCT = ("ftbench", "operator/ftbench_operator", "trainer-image/ftbench_trainer")


def test_broad_excepts_are_few_and_say_why() -> None:
    """Issue 43.3: `except Exception` (or BaseException, or bare) only where a failure must never
    propagate (reporters, a retry loop, cleanup, a run's own outcome), each saying so in a comment on
    its line; at most 10 in the product. A narrower tuple names what is expected everywhere else."""
    import ast

    found: list[str] = []
    for root in PRODUCT:
        for path in sorted((REPO / root).rglob("*.py")):
            lines = path.read_text().splitlines()
            for node in ast.walk(ast.parse("\n".join(lines))):
                if isinstance(node, ast.ExceptHandler) and (
                    node.type is None or getattr(node.type, "id", None) in {"Exception", "BaseException"}
                ):
                    where = f"{path.relative_to(REPO)}:{node.lineno}"
                    assert "  # " in lines[node.lineno - 1], f"{where}: a broad except says why on its line"
                    found.append(where)
    assert len(found) <= 10, found
