"""Contracts between the parts that run in different processes and images.

`plan`: what the operator/CLI renders and the trainer executes. `results`: what the trainer reports
and the operator writes into status. `env`: the environment variables one side sets and the other
reads. `labels`: label and annotation keys and the selectors built from them. `progress`: the
progress line on the trainer's stdout and `status.progress`. Every side imports these modules,
never copies of them (tests/unit/test_contract_names.py checks it).
"""
