"""The environment contract between the rendered pods and `ftbench-trainer`.

The pods run ``ftbench-trainer --plan /etc/ftbench/plan.json``. The plan (a ConfigMap) says
*what* to run; these variables say *where this pod is* in the run, which only Kubernetes knows
at start time. Both sides import the names from here, so a rename breaks the tests, not a run.
ftbench's other variables cross a process boundary too (an image, a chart, a shell script or a
user's shell to Python), so they are named here as well: tests/unit/test_contract_names.py fails on
an ``FTBENCH_*`` name spelled anywhere else. Who sets each variable, and what the rank and trial
variables mean under each runtime, is in the design notes.

Design notes: docs/design-notes.md, "ftbench/contracts/env.py".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the standard library only at run time: the dev cluster (stdlib only) reads these names
    from ftbench.contracts.plan import LaunchPlan

FTBENCH_IMAGE = "FTBENCH_IMAGE"
FTBENCH_POD_NAME = "FTBENCH_POD_NAME"
FTBENCH_NAMESPACE = "FTBENCH_NAMESPACE"
FTBENCH_POD_IP = "FTBENCH_POD_IP"
FTBENCH_TRIAL_INDEX = "FTBENCH_TRIAL_INDEX"
FTBENCH_TRIAL_FAILURE_EXIT_ZERO = "FTBENCH_TRIAL_FAILURE_EXIT_ZERO"
HF_HOME = "HF_HOME"
# Set by the trainer's node launcher for its ranks: the accelerate config file it wrote (for the
# equivalent bare command the results keep).
FTBENCH_ACCELERATE_CONFIG = "FTBENCH_ACCELERATE_CONFIG"

# Read by every training process; not set by the manifests.
FTBENCH_SAMPLE_INTERVAL = "FTBENCH_SAMPLE_INTERVAL"
# Read by the memory predictor: the folder its traces are kept in (default: the cache root's traces/), or "off".
FTBENCH_TRACE_CACHE = "FTBENCH_TRACE_CACHE"
# Read by `ftbench predict` (ftbench.local.resident): how many idle seconds its resident predictor waits for the
# next question before it exits (default 600), or "off" for one predictor process per call.
FTBENCH_PREDICTOR = "FTBENCH_PREDICTOR"
# Read by `ftbench predict` of a sweep, `--min-gpus` and `ftbench calibrate` (ftbench.local.predict): how many
# predictor processes one batch of plans may spread over (default: the cores it may run on, at most 4).
FTBENCH_PREDICT_PROCESSES = "FTBENCH_PREDICT_PROCESSES"
# Set by Dockerfile.trainer (informational).
FTBENCH_ENGINE = "FTBENCH_ENGINE"
# A user's machine: `ftbench run`, `ftbench engines`, `ftbench dev`.
FTBENCH_HOME = "FTBENCH_HOME"
FTBENCH_CACHE = "FTBENCH_CACHE"
# The operator's Deployment (Helm chart): `FTBENCH_OPERATOR_<FIELD>` per OperatorSettings field.
OPERATOR_SETTINGS_PREFIX = "FTBENCH_OPERATOR_"
POD_NAMESPACE = "POD_NAMESPACE"

# Indexed Jobs (Kubernetes).
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
JOB_COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

# PyTorchJob (Kubeflow training operator, node-level values).
PYTORCHJOB_RANK = "RANK"
PYTORCHJOB_MASTER_ADDR = "MASTER_ADDR"
PYTORCHJOB_MASTER_PORT = "MASTER_PORT"

# TrainJob (Kubeflow Trainer v2 torch plugin, node-level values; reserved: a TrainJob may not set them).
TRAINJOB_NUM_NODES = "PET_NNODES"
TRAINJOB_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
TRAINJOB_NODE_RANK = "PET_NODE_RANK"
TRAINJOB_MASTER_ADDR = "PET_MASTER_ADDR"
TRAINJOB_MASTER_PORT = "PET_MASTER_PORT"
TRAINJOB_RESERVED = frozenset(
    {TRAINJOB_NUM_NODES, TRAINJOB_NPROC_PER_NODE, TRAINJOB_NODE_RANK, TRAINJOB_MASTER_ADDR, TRAINJOB_MASTER_PORT}
)

# Kubeflow Trainer v2's TrainJob status endpoint (injected by its TrainJobStatus plugin; the
# request is ftbench.contracts.trainer_status). DISABLE_KUBEFLOW_INTEGRATION is transformers' switch
# for its own KubeflowCallback: the trainer sets it so that ftbench's rank 0 is the one reporter.
KUBEFLOW_TRAINER_SERVER_URL = "KUBEFLOW_TRAINER_SERVER_URL"
KUBEFLOW_TRAINER_SERVER_CA_CERT = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
KUBEFLOW_TRAINER_SERVER_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
DISABLE_KUBEFLOW_INTEGRATION = "DISABLE_KUBEFLOW_INTEGRATION"

# DeepSpeed's accelerator choice: the trainer sets cpu for CPU ranks (DeepSpeed then uses gloo).
DS_ACCELERATOR = "DS_ACCELERATOR"

# NCCL (read by NCCL itself; named here so render and tests agree).
NCCL_IB_DISABLE = "NCCL_IB_DISABLE"
NCCL_DEBUG = "NCCL_DEBUG"
NCCL_DEBUG_SUBSYS = "NCCL_DEBUG_SUBSYS"
# Where NCCL writes its debug lines (%h host, %p pid expanded by NCCL): the trainer points it at a
# file of its own for the network preflight and reads the transport lines back from it.
NCCL_DEBUG_FILE = "NCCL_DEBUG_FILE"
# What the network preflight needs from NCCL (its values for NCCL_DEBUG and NCCL_DEBUG_SUBSYS).
NCCL_PREFLIGHT_DEBUG = "INFO"
NCCL_PREFLIGHT_SUBSYS = ("INIT", "NET")


class RendezvousEnvError(ValueError):
    """The pod's environment lacks what the plan's rendezvous source needs."""


@dataclass(frozen=True)
class NodePlacement:
    """Where this pod sits in the run: the values for `accelerate launch`'s multi-node flags."""

    node_rank: int
    num_machines: int
    master_addr: str
    master_port: int


def node_placement(plan: LaunchPlan, environ: Mapping[str, str]) -> NodePlacement:
    """Resolve this pod's node rank and the master address from `environ` per the plan.

    Pure (the trainer passes `os.environ`), so tests can check each runtime's contract.
    """
    rdzv = plan.rendezvous
    nodes = plan.topology.number_nodes
    if rdzv.source == "local":
        return NodePlacement(0, nodes, "127.0.0.1", rdzv.port)
    if rdzv.source == "indexedjob":
        return NodePlacement(_int_env(environ, JOB_COMPLETION_INDEX), nodes, rdzv.master_host, rdzv.port)
    if rdzv.source == "trainjob":
        _expect(environ, TRAINJOB_NUM_NODES, nodes)
        _expect(environ, TRAINJOB_NPROC_PER_NODE, plan.topology.processes_per_node)
        return NodePlacement(
            _int_env(environ, TRAINJOB_NODE_RANK),
            nodes,
            _env(environ, TRAINJOB_MASTER_ADDR),
            _int_env(environ, TRAINJOB_MASTER_PORT),
        )
    return NodePlacement(
        _int_env(environ, PYTORCHJOB_RANK),
        nodes,
        _env(environ, PYTORCHJOB_MASTER_ADDR),
        _int_env(environ, PYTORCHJOB_MASTER_PORT),
    )


def trial_index(environ: Mapping[str, str]) -> int | None:
    """The one trial this pod runs, or None to run all of the plan's trials in sequence."""
    return _int_env(environ, FTBENCH_TRIAL_INDEX) if FTBENCH_TRIAL_INDEX in environ else None


def trial_failure_exit_zero(environ: Mapping[str, str]) -> bool:
    return environ.get(FTBENCH_TRIAL_FAILURE_EXIT_ZERO, "").lower() == "true"


def _env(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name)
    if not value:
        raise RendezvousEnvError(f"{name} is not set; the pod was not started by the runtime the plan names")
    return value


def _expect(environ: Mapping[str, str], name: str, planned: int) -> None:
    """A runtime-injected count must match the plan's (accelerate launches the plan's topology)."""
    got = _int_env(environ, name)
    if got != planned:
        raise RendezvousEnvError(
            f"{name}={got} but the plan runs {planned}; the TrainJob's runtime changed the topology "
            "(check the ClusterTrainingRuntime's mlPolicy and the TrainJob's spec.trainer)"
        )


def _int_env(environ: Mapping[str, str], name: str) -> int:
    value = _env(environ, name)
    try:
        return int(value)
    except ValueError as err:
        raise RendezvousEnvError(f"{name}={value!r} is not an integer") from err


def operator_setting(field: str) -> str:
    """The variable that sets OperatorSettings field `field`, e.g. `metrics_port` ->
    `FTBENCH_OPERATOR_METRICS_PORT` (what the chart and the tests that start an operator set)."""
    return OPERATOR_SETTINGS_PREFIX + field.upper()


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """`FTBENCH_CACHE`, else ~/.cache/ftbench: one root for every cache ftbench and its scripts share."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(FTBENCH_CACHE) or Path.home() / ".cache" / "ftbench")
