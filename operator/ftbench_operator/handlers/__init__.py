"""Handler bodies, one module per concern; `ftbench_operator.app` wires them to kopf."""
