"""`spec.run`: how ftbench runs an experiment on Kubernetes (runtime, queue, limits, preflights).

Not part of the seed's parameters; a sweep's points share one (FineTuneSweepSpec.run).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ftbench.api.api_model import ApiModel
from ftbench.api.bounds import DNS_LABEL, MAX_SECONDS, QUANTITY, PriorityClassName
from ftbench.contracts.enums import NetworkPreflight, OomPrecheck, Runtime


class RunSettings(ApiModel):
    """How ftbench runs the experiment on Kubernetes. Not part of the seed's parameters."""

    runtime: Runtime = Field(
        default=Runtime.AUTO,
        description=(
            "Which Kubernetes object runs the pods: Job (single node), IndexedJob (+ headless Service, "
            "multi-node without a training operator), PyTorchJob (Kubeflow training operator v1), TrainJob "
            "(Kubeflow Trainer v2), or auto: the cluster profile's runtime when it pins one, else Job for one "
            "node and, for several, TrainJob where Trainer v2 and its runtime are installed, else PyTorchJob "
            "where the training operator is, else IndexedJob."
        ),
    )
    queue_name: Annotated[str, Field(max_length=63, pattern=DNS_LABEL)] | None = Field(
        default=None,
        description="Kueue LocalQueue to submit to (sets the kueue.x-k8s.io/queue-name label).",
    )
    priority_class_name: PriorityClassName | None = Field(
        default=None, description="PriorityClass of the training pods."
    )
    active_deadline_seconds: Annotated[int, Field(ge=1, le=MAX_SECONDS)] | None = Field(
        default=None,
        description=(
            "Wall-clock limit for the whole run in seconds; the run fails with DeadlineExceeded after it. "
            "Unset: no limit."
        ),
    )
    memory: Annotated[str, Field(max_length=32, pattern=QUANTITY)] | None = Field(
        default=None,
        description="Memory request and limit of each training pod (a Kubernetes quantity, e.g. 200Gi). "
        "Unset: the cluster profile's default.",
    )
    nccl_debug: bool = Field(
        default=False,
        description="Set NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV) so the logs show "
        "whether NCCL uses RoCE (see docs/roce.md).",
    )
    network_preflight: NetworkPreflight = Field(
        default=NetworkPreflight.AUTO,
        description="Before training, every rank runs a short all-reduce and all-gather bandwidth test with "
        "torch.distributed (NCCL on GPUs, gloo on CPU ranks): message sizes small to large, warm-up then timed "
        "iterations, at most about 30 s. status.environment.network records algbw and busbw per size "
        "(nccl-tests' definitions), the peak busbw and the transport NCCL really used (IB verbs on RoCE or "
        "InfiniBand, or TCP sockets; GPUDirect RDMA; devices), read from NCCL's own init lines. auto: on for "
        "multi-node runs; on: every run with more than one rank; off: never; only: the preflight and nothing "
        "else (no model is loaded, nothing is trained; the ranks and network the spec asks for are checked, as "
        "seed 004 does before its study; the BusBW column shows the bus bandwidth) (docs/roce.md).",
    )
    oom_precheck: OomPrecheck = Field(
        default=OomPrecheck.WARN,
        description="Before anything is created the operator predicts the peak memory per GPU (the predictor "
        "service traces one training step of the model's architecture from its config.json, no weights) into "
        "status.prediction, and compares it with the GPU model's memory in the cluster profile (gpuMemory). warn: "
        "a predicted OOM is a Warning Event and condition MemoryFits=False, the run goes ahead; refuse: the run "
        "ends Invalid with reason PredictedOOM and the numbers, before any pod starts; off: no prediction. "
        "Needs the chart's predictor (docs/measurements.md, Predicted memory). The operator acts on it; ftbench run on "
        "this machine does not (ftbench predict answers there).",
    )
    require_roce: bool = Field(
        default=False,
        description="Refuse to train unless the network preflight shows NCCL on RoCE (IB verbs over an "
        "Ethernet link layer): otherwise the run ends Invalid with reason RoceNotInEffect before any training "
        "step, instead of measuring a socket fallback. Needs enableRoce, numberNodes >= 2 and networkPreflight "
        "not off.",
    )
