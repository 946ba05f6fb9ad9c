"""Statistics of measurements: confidence intervals for correlated step series, noise rules.

Pure standard-library arithmetic shared by the trainer (which computes a run's intervals and flags
from its step times) and the CLI and reports (which compare runs and repeats). docs/measurements.md
"How sure a number is" gives every formula and threshold; tests check them on synthetic series with
known answers.
"""
