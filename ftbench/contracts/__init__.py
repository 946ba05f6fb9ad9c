"""Contracts between the parts that run in different images.

`plan`: what the operator/CLI renders and the trainer executes. `results`: what the trainer reports
and the operator writes into status. Both sides import these modules, never copies of them.
"""
