"""`ftbench report` and `ftbench results compare`: what sweeps and runs measured, as tables and plots.

`data` is the neutral input (from the local store, or `cluster` for FineTuneSweeps and their
experiments), `plots` draws it with matplotlib (imported lazily: the CLI's `report` extra),
`render` writes report.md and a self-contained report.html, `compare` puts two runs side by side.
"""
