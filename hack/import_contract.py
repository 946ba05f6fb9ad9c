"""The import contract (import-contract.toml): check the code against it, or write its table.

    python hack/import_contract.py            # check every import of the four packages; exit 1 on a breach
    python hack/import_contract.py --write    # write the table and the picture into docs/architecture.md
    python hack/import_contract.py --check-docs   # exit 1 when docs/architecture.md is stale

The standard library only (tomllib, ast), so it runs before any environment exists. Imports are read
from the source with `ast`, those inside functions too: a lazy import is still an arrow. An import
`from package import name` points at `package.name` when that is a module, else at `package`.
tests/unit/test_layering.py runs `breaches`, `module_cycles` and `check_docs` in CI.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTRACT = REPO / "import-contract.toml"
DOC = REPO / "docs" / "architecture.md"
START, END = "<!-- import-contract:start -->", "<!-- import-contract:end -->"
# The packages and the folder each lives in (module `ftbench_operator.x` is operator/ftbench_operator/x.py).
ROOTS = {
    "ftbench": REPO,
    "ftbench_operator": REPO / "operator",
    "ftbench_trainer": REPO / "trainer-image",
    "ftbench_devcluster": REPO / "devcluster",
}
TOP = "ftbench"  # the part of the `ftbench` package's top-level modules


@dataclass(frozen=True)
class Part:
    key: str  # a folder relative to the repository, e.g. "ftbench/contracts"
    holds: str
    may_import: frozenset[str]
    libraries: frozenset[str]


def load(path: Path = CONTRACT) -> dict[str, Part]:
    raw = tomllib.loads(path.read_text())["parts"]
    return {key: Part(key, p["holds"], frozenset(p["may_import"]), frozenset(p["libraries"])) for key, p in raw.items()}


def modules() -> dict[str, Path]:
    """Module name -> file, for every module of the four packages."""
    found = {}
    for package, parent in ROOTS.items():
        for path in sorted((parent / package).rglob("*.py")):
            name = ".".join(path.relative_to(parent).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def part_of(path: Path, parts: dict[str, Part]) -> str | None:
    """The part named by the file itself, else the longest part folder that holds `path`; `ftbench`
    itself only for its top-level modules."""
    rel = path.relative_to(REPO).as_posix()
    if rel in parts:
        return rel
    folder = rel.rsplit("/", 1)[0]
    if folder == TOP:
        return TOP if TOP in parts else None
    keys = [k for k in parts if k != TOP and (rel.startswith(k + "/"))]
    return max(keys, key=len) if keys else None


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, imported module or third-party top-level name) of every import in the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                out.append((node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base))
    return out


def resolve(target: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `target` names (None: not one of ours)."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def breaches(parts: dict[str, Part] | None = None) -> list[str]:
    """Every import the contract does not allow, and every module no part holds."""
    parts = parts if parts is not None else load()
    known = modules()
    found = []
    for name, path in known.items():
        rel = path.relative_to(REPO).as_posix()
        mine = part_of(path, parts)
        if mine is None:
            found.append(f"{rel}: in no part of import-contract.toml; add its folder as a part")
            continue
        allowed = parts[mine].may_import | {mine}
        for line, target in imports(name, path, known):
            top = target.split(".")[0]
            if top in ROOTS:
                module = resolve(target, known)
                theirs = part_of(known[module], parts) if module else None
                if theirs is not None and theirs not in allowed:
                    found.append(f"{rel}:{line}: {mine} may not import {theirs} ({target})")
            elif top and top not in sys.stdlib_module_names and top not in parts[mine].libraries:
                found.append(f"{rel}:{line}: {mine} may not import the library {top}")
    return found + [f"import-contract.toml: a circle of parts: {' -> '.join(c)}" for c in _cycles(_declared(parts))]


def _declared(parts: dict[str, Part]) -> dict[str, set[str]]:
    return {k: set(p.may_import) for k, p in parts.items()}


def module_cycles() -> list[list[str]]:
    """Circles among the modules themselves (strongly connected components of two or more)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for _, target in imports(name, path, known):
            module = resolve(target, known)
            if module is not None and module != name:
                graph[name].add(module)
    return _cycles(graph)


def unit_of(name: str, known: dict[str, Path]) -> str:
    """The unit a module belongs to for the sub-package check: its sub-package (`ftbench_trainer.measure`),
    else the module itself (`ftbench_trainer.worker`)."""
    parts = name.split(".")
    if len(parts) >= 2:
        candidate = ".".join(parts[:2])
        if candidate in known and known[candidate].name == "__init__.py":
            return candidate
    return ".".join(parts[:2]) if len(parts) > 2 else name


def subpackage_cycles() -> list[list[str]]:
    """Circles among each package's sub-packages and top-level modules, lazy imports included: a module
    circle can hide behind function-level imports between sub-packages (measure -> predict -> engines ->
    measure did) that no module pair shows."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        mine = unit_of(name, known)
        graph.setdefault(mine, set())
        for _, target in imports(name, path, known):
            module = resolve(target, known)
            if module is not None and (theirs := unit_of(module, known)) != mine:
                graph[mine].add(theirs)
    return _cycles(graph)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _short(key: str) -> str:
    return "`ftbench` (top level)" if key == TOP else key.rsplit("/", 1)[-1].removesuffix(".py")


def _reduced(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The transitive reduction of an acyclic graph: an arrow implied by a longer path is left out."""

    def reach(v: str, seen: set[str]) -> set[str]:
        for w in graph[v]:
            if w not in seen:
                seen.add(w)
                reach(w, seen)
        return seen

    return {v: {w for w in ws if not any(w in reach(u, set()) for u in ws - {w})} for v, ws in graph.items()}


def section(parts: dict[str, Part] | None = None) -> str:
    """The generated part of docs/architecture.md: the picture of the parts, then the table."""
    parts = parts if parts is not None else load()
    ids = {k: k.replace("/", "_").replace("-", "_").replace(".", "_") for k in parts}
    lines = [START, "<!-- Generated by `python hack/import_contract.py --write` from import-contract.toml. -->", ""]
    lines += ["```mermaid", "graph TD"]
    for key in parts:
        lines.append(f'  {ids[key]}["{key}"]')
    reduced = _reduced(_declared(parts))
    for key in parts:
        lines += [f"  {ids[key]} --> {ids[t]}" for t in sorted(reduced[key])]
    lines += ["```", "", "An arrow: may import (arrows implied by a longer path are not drawn).", ""]
    lines += ["| Folder | Holds | May import |", "|---|---|---|"]
    for key, part in parts.items():
        folder = f"`{key}/` (top-level modules)" if key == TOP else f"`{key}`" if key.endswith(".py") else f"`{key}/`"
        allowed = [_short(k) for k in sorted(part.may_import)] or ["nothing of ours"]
        libraries = ", ".join(f"`{lib}`" for lib in sorted(part.libraries))
        cell = ", ".join(allowed) + "; the standard library" + (f", {libraries}" if libraries else "")
        lines.append(f"| {folder} | {part.holds} | {cell} |")
    return "\n".join([*lines, END])


def with_section(text: str, generated: str) -> str:
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return head + generated + tail


def check_docs() -> bool:
    text = DOC.read_text()
    return START in text and with_section(text, section()) == text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the table into docs/architecture.md")
    parser.add_argument("--check-docs", action="store_true", help="exit 1 when docs/architecture.md is stale")
    args = parser.parse_args()
    if args.write:
        DOC.write_text(with_section(DOC.read_text(), section()))
        return 0
    if args.check_docs:
        fresh = check_docs()
        print("docs/architecture.md is current" if fresh else "stale: run `python hack/import_contract.py --write`")
        return 0 if fresh else 1
    problems = breaches() + [f"a circle of modules: {' -> '.join(c)}" for c in module_cycles()]
    problems += [f"a circle of sub-packages: {' -> '.join(c)}" for c in subpackage_cycles()]
    print("\n".join(problems) or "the import contract holds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
