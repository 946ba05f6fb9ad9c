"""Predict one rank's peak tensor memory for a launch plan, before any weights load.

`predict(plan)` reads the model's config (config.json only), traces two training steps of that
architecture with fake tensors (`trace`), rescales the traced split for the plan's sharding
(`shard`) and returns a `ftbench.contracts.prediction.MemoryPrediction`.

    python -m ftbench_trainer.predict --plan plan.json

prints one `FTBENCH_PREDICTION {...}` line (`ftbench predict` runs this in the engine's environment).
"""
