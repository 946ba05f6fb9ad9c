"""Measurement: exact token counts, step timing, system sampling, stop controls and MFU.

Everything here runs inside the training processes. The pieces are plain classes (testable with
synthetic inputs); `callback.MeasureCallback` wires them into a transformers Trainer, which both
engines (fms-hf-tuning and trl) use. The formulas are pure and need neither torch nor transformers:
`window` cuts one rank's measured steps, `combine` turns every rank's report into `Metrics`.
docs/measurements.md defines every reported number.
"""
