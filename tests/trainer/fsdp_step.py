"""Real FSDP2 steps on CPU ranks, counted by the predictor's tracker (run by torch.distributed.run).

`python -m torch.distributed.run --nproc_per_node N fsdp_step.py CASES.json OUT_DIR`: for each case
every rank builds the same architecture with real weights, shards it as accelerate does with FSDP2
(`shard_like_accelerate`: each decoder layer, then the root), runs the predictor's steady-state
step (`run_steps`: forward, backward, clipping, AdamW, zero_grad) for real over gloo under
`StorageTracker`, and writes each phase's peak to OUT_DIR/case-I-rank-R.json. The test compares
them with the prediction, which traces the same step with fake tensors on a fake process group.
Each phase starts settled (`StorageTracker(settle=True)`), as the product's CPU measurement of the
optimizer step does (measure/tensor_peak.py).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from ftbench_trainer.measure.storage import StorageTracker
from ftbench_trainer.predict.model import architecture_config
from ftbench_trainer.predict.step import StepShape
from ftbench_trainer.predict.trace import add_adapter, build_model, run_steps, shard_like_accelerate


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for i, case in enumerate(cases):
        config = architecture_config(case["config"])
        shape = StepShape(**case["shape"])
        torch.manual_seed(0)
        model = add_adapter(build_model(config, shape, device="cpu"), shape)
        model = shard_like_accelerate(model, mesh, reshard_after_forward=case["reshard_after_forward"])
        batch = functools.partial(torch.randint, 0, int(config.vocab_size), (shape.batch, shape.seq))
        trace = run_steps(model, shape, StorageTracker(settle=True), make_batch=batch)
        phases = {name: split.__dict__ for name, split in trace.phases.items()}
        (out / f"case-{i}-rank-{dist.get_rank()}.json").write_text(json.dumps(phases))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
