"""This machine: its processes and its GPUs (shared by `ftbench run`, the dev cluster and its kubelet)."""
