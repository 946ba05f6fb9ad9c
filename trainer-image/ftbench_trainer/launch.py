"""Node-level launch: where this node sits in the job, and how its training processes start.

The Kubernetes runtimes describe a node's place differently (the plan's `rendezvous`: ``local``,
``pytorchjob``, ``indexedjob``, ``trainjob``); each is mapped onto accelerate's machine_rank /
main_process_ip / main_process_port. With launcher ``accelerate`` the plan's accelerate config is
written to a file with those values filled and ``accelerate launch -m ftbench_trainer.worker``
starts the node's processes. Each rank writes its own result; `merge_rank_results` turns them into
the node's result. The env var names and their resolution are the shared contract `ftbench.contracts.env`.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/launch.py".
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ftbench.contracts import env
from ftbench.contracts.env import NodePlacement, node_placement
from ftbench.contracts.outcomes import OUTCOMES
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.results import Outcome, RunError, TrainerResult

log = logging.getLogger(__name__)


def accelerate_config(plan: LaunchPlan, place: NodePlacement) -> dict:
    """The plan's accelerate config with this node's machine_rank and the master filled in.

    An FSDP config without a layer class (a model the catalog does not describe, e.g. one added
    by a model map) gets the model's own ``_no_split_modules``, read here so the written config
    says what FSDP wraps (ado and accelerate fall back to the same attribute).
    """
    if plan.accelerate_config is None:
        raise ValueError("launcher accelerate needs plan.accelerateConfig")
    config = {
        **plan.accelerate_config,
        "machine_rank": place.node_rank,
        "num_machines": place.num_machines,
        "main_process_ip": place.master_addr,
        "main_process_port": place.master_port,
    }
    fsdp = config.get("fsdp_config")
    if isinstance(fsdp, dict) and not fsdp.get("fsdp_transformer_layer_cls_to_wrap"):
        layers = model_layer_classes(plan.model.ref)
        if layers:
            config["fsdp_config"] = {**fsdp, "fsdp_transformer_layer_cls_to_wrap": layers}
    return config


def model_layer_classes(model_ref: str) -> str | None:
    """Comma-separated ``_no_split_modules`` of the model's architectures (config.json only, no
    weights loaded); None when the config cannot be read or names no such classes."""
    try:
        import transformers

        config = transformers.AutoConfig.from_pretrained(model_ref)
    except (OSError, ValueError) as exc:
        print(f"ftbench: cannot read the config of {model_ref} for FSDP's layer class: {exc}", file=sys.stderr)
        return None
    names: list[str] = []
    for arch in getattr(config, "architectures", None) or []:
        names += list(getattr(getattr(transformers, arch, None), "_no_split_modules", None) or [])
    return ",".join(dict.fromkeys(names)) or None


def write_accelerate_config(plan: LaunchPlan, place: NodePlacement) -> Path:
    path = Path(plan.output.dir) / f"accelerate-node{place.node_rank}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(accelerate_config(plan, place), sort_keys=True))
    return path


def accelerate_command(config: Path, plan_path: str, trial: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config)]
    cmd += ["-m", "ftbench_trainer.worker", "--plan", plan_path]
    return cmd + (["--trial", str(trial)] if trial is not None else [])


def node_ranks(plan: LaunchPlan, place: NodePlacement) -> range:
    per_node = plan.topology.processes_per_node
    return range(place.node_rank * per_node, (place.node_rank + 1) * per_node)


def merge_rank_results(results: list[TrainerResult | None], returncode: int) -> TrainerResult:
    """The node's result from its ranks' results (None: that rank wrote none).

    Any rank's GPU OOM decides the run (the other ranks typically die of the broken collective
    afterwards); otherwise the first failure; success only if every rank succeeded. Every rank having
    written a successful result is a complete measurement even when the launcher then exits non-zero:
    a rank can abort in C++ teardown after its result is written ("terminate called without an active
    exception", seen with 4 gloo ranks on CPU), which says nothing about what was measured (logged).
    """
    present = [r for r in results if r is not None]
    for outcome in (Outcome.GPU_OOM, Outcome.NETWORK_UNFIT, Outcome.FAILED):
        for r in present:
            if r.outcome == outcome:
                return r
    if present and len(present) == len(results):
        if returncode != 0:
            log.warning("accelerate launch exited with code %s after every rank wrote its result", returncode)
        return present[0]
    missing = len(results) - len(present)
    return TrainerResult(
        outcome=Outcome.FAILED,
        reason=OUTCOMES[Outcome.FAILED].result_reason,
        error=RunError(
            type="ProcessExit",
            message=f"accelerate launch exited with code {returncode}; {missing} rank(s) wrote no result",
        ),
    )


def run_accelerate(plan: LaunchPlan, plan_path: str, trial: int | None) -> TrainerResult:
    from ftbench_trainer.worker import rank_result_path

    place = node_placement(plan, os.environ)
    ranks = node_ranks(plan, place)
    for rank in ranks:  # stale files from an earlier attempt must not count
        rank_result_path(plan, rank).unlink(missing_ok=True)
    config = write_accelerate_config(plan, place)
    ranks_env = {**os.environ, env.FTBENCH_ACCELERATE_CONFIG: str(config)}
    proc = subprocess.run(accelerate_command(config, plan_path, trial), check=False, env=ranks_env)
    results = []
    for rank in ranks:
        path = rank_result_path(plan, rank)
        results.append(TrainerResult.from_json(path.read_text()) if path.is_file() else None)
    return merge_rank_results(results, proc.returncode)
