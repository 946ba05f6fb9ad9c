"""Training engines: the fms-hf-tuning releases offered, their locks and local environments."""
