"""The `ftbench` command line. Each command group lives in its own module with a `register()`."""

from ftbench.cli.main import main

__all__ = ["main"]
