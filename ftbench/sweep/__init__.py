"""Sweeps as pure functions: expand a FineTuneSweep into points, order them by memory demand,
prune predicted OOMs, decide which runs to start next and build the status table.

The operator (`ftbench_operator.handlers.handle_sweep`) and `ftbench sweep` (local) both call
these with what they observed (child experiments, or the local results store), so a sweep is
ordered, pruned and counted the same way wherever it runs.
"""
