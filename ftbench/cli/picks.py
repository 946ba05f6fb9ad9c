"""What a user can pick, for the help texts: engines, runtimes and the example files.

Built from the same sources the commands use (the Engine and Runtime enums, the release list, the
examples directory of a source checkout), so `ftbench --help` cannot name an engine, runtime or
example that does not exist (tests/unit/test_cli.py checks every command's help against them). `ftbench.cli.main`
puts it at the end of every command's --help.
"""

from __future__ import annotations

from pathlib import Path

from ftbench.contracts.enums import Engine, Runtime

# examples/ of a source checkout (pip installs ftbench without it).
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


def example_files() -> list[str]:
    """examples/*.yaml relative to the checkout, or [] where ftbench was installed without them."""
    if not EXAMPLES_DIR.is_dir():
        return []
    return [f"examples/{p.name}" for p in sorted(EXAMPLES_DIR.glob("*.yaml"))]


def epilog() -> str:
    from ftbench.engines.releases import load_releases

    releases = load_releases()
    lines = [
        f"engines (spec.engine): {Engine.TRL.value} (this environment's trl), {Engine.FMS_HF_TUNING.value} "
        f"(releases: `ftbench catalog engines`; default {releases.default})",
        f"runtimes (spec.run.runtime, render --runtime): {', '.join(r.value for r in Runtime)}",
    ]
    if examples := example_files():
        lines.append(f"examples: {', '.join(examples)} (start with examples/quickstart.yaml: CPU, about a minute)")
    return "\n".join(lines)
