"""Which optional extra a command needs, and the one-line message when it is not installed.

`pip install ftbench` brings pydantic and pyyaml only (validate, render, catalog, crd, docs); the
rest lives in extras (pyproject.toml): `trainer` (torch, trl, ..., and uv for the fms-hf-tuning
environments), `report` (matplotlib) and `operator` (kopf, the kubernetes client). A command that
reaches a missing one must say which extra to install instead of ending in a traceback, so the
commands check up front (`require`, raising MissingExtra) and `ftbench.cli.main` prints that, and
turns any other ModuleNotFoundError of a module listed here into the same message. Standard library
only: it must import where the extras are missing.
"""

from __future__ import annotations

import importlib.util

#: The modules each extra provides that ftbench imports (top-level names).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "trainer": ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "psutil", "pynvml"),
    "report": ("matplotlib",),
    "operator": ("kubernetes", "kopf", "prometheus_client"),
}
EXTRA_OF_MODULE: dict[str, str] = {m: extra for extra, modules in EXTRA_MODULES.items() for m in modules}


class MissingExtra(ModuleNotFoundError):
    """A command needs an optional extra that is not installed; the message says which (the CLI
    prints it, exit status 2, as for any other usage problem)."""


def install_hint(extra: str) -> str:
    return f"pip install 'ftbench[{extra}]'"


def message(what: str, extra: str, missing: str) -> str:
    return f"{what} needs the {extra} extra ({missing} is not installed): {install_hint(extra)}"


def require(extra: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise MissingExtra unless every module of `extra` (or the `modules` given) can be imported here."""
    for module in modules or EXTRA_MODULES[extra]:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(message(what, extra, module))


def from_import_error(err: ModuleNotFoundError) -> str | None:
    """The message for an import of an extra's module that failed; None for any other module."""
    top = (err.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    return None if extra is None else message("this command", extra, top)
