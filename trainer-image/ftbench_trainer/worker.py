"""One training process: resolve model and dataset, train with the measuring callback, classify.

Runs in-process for the direct launcher (one process, as seed 001 runs `tuning.sft_trainer`
for <= 1 GPU) and as `python -m ftbench_trainer.worker` under `accelerate launch` otherwise.
Every rank writes its own result to `<output dir>/ranks/rank-<N>.json`: the node-level launcher
merges them, so an OOM on any rank classifies the run even when the other ranks then die of
the broken collective.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import MappingProxyType

from ftbench.api.network import roce_problem
from ftbench.contracts import env as E
from ftbench.contracts.enums import DistributedBackend
from ftbench.contracts.environment import COMMAND_LIMIT, DeepSpeedInEffect, FsdpInEffect, RunEnvironment
from ftbench.contracts.network import NetworkInEffect
from ftbench.contracts.outcomes import OUTCOMES
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.results import REASON_NETWORK_CHECKED, Outcome, RunError, TrainerResult, classify_exception
from ftbench_trainer.inputs import resolve_dataset, resolve_model
from ftbench_trainer.live_metrics import LiveMetricsServer

log = logging.getLogger(__name__)

ERROR_MESSAGE_LIMIT = 1500
# The exit code of each outcome, read from the outcome table (the one source).
EXIT_CODES = MappingProxyType({outcome: rule.exit_code for outcome, rule in OUTCOMES.items()})


def rank_result_path(plan: LaunchPlan, rank: int) -> Path:
    return Path(plan.output.dir) / "ranks" / f"rank-{rank}.json"


def exception_type_name(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def failure_result(
    exc: BaseException,
    *,
    trial: int | None = None,
    started_at: datetime | None = None,
    environment: RunEnvironment | None = None,
) -> TrainerResult:
    """Seed 001's is_valid logic: GPU OOM is a valid 'does not fit' measurement, the rest Failed; an
    exception may carry its own `outcome` (NetworkUnfitError)."""
    outcome = getattr(exc, "outcome", None) or classify_exception(exc)
    message = " ".join(str(exc).strip().splitlines()[:5]) or exception_type_name(exc)
    return TrainerResult(
        outcome=outcome,
        is_valid=OUTCOMES[outcome].is_valid,
        # An exception may name its own reason (e.g. EngineMismatch); the outcome still decides validity.
        reason=getattr(exc, "reason", None) or OUTCOMES[outcome].result_reason,
        error=RunError(type=exception_type_name(exc), message=message[:ERROR_MESSAGE_LIMIT]),
        environment=environment,
        trial=trial,
        started_at=started_at,
        finished_at=datetime.now(UTC),
    )


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


class BackendNotInEffectError(RuntimeError):
    """The plan asked for FSDP or DeepSpeed but the engine ran otherwise: the run would be reported wrongly."""


def check_fsdp(plan: LaunchPlan, fsdp: FsdpInEffect | None) -> None:
    """Refuse a result that would claim an FSDP run the model did not have (e.g. a stack on which
    FSDP on CPU ranks silently fell back to DDP), or another FSDP version than the plan's."""
    if plan.distributed_backend != DistributedBackend.FSDP or plan.fsdp is None:
        return
    if fsdp is None:
        raise BackendNotInEffectError(
            "the plan asks for FSDP but the model was not wrapped by FSDP (accelerate prepared it as "
            "another distributed type); no FSDP result is reported"
        )
    if fsdp.version != plan.fsdp.version:
        raise BackendNotInEffectError(
            f"the plan asks for FSDP{plan.fsdp.version} but FSDP{fsdp.version} wrapped the model"
        )


def check_deepspeed(plan: LaunchPlan, deepspeed: DeepSpeedInEffect | None) -> None:
    """Refuse a result that would claim a DeepSpeed ZeRO run the engine did not have, or another stage
    or offload than the plan's."""
    asked = plan.training.deepspeed
    if asked is None:
        return
    if deepspeed is None:
        raise BackendNotInEffectError(
            "the plan asks for DeepSpeed but the engine ran without it; no result is reported"
        )
    offload = ("cpu" if asked.offload_optimizer else "none", "cpu" if asked.offload_parameters else "none")
    if (deepspeed.zero_stage, deepspeed.offload_optimizer_device, deepspeed.offload_param_device) != (
        asked.zero_stage,
        *offload,
    ):
        raise BackendNotInEffectError(
            f"the plan asks for DeepSpeed ZeRO-{asked.zero_stage} with offload {offload}, but the engine ran "
            f"ZeRO-{deepspeed.zero_stage} with offload "
            f"{(deepspeed.offload_optimizer_device, deepspeed.offload_param_device)}"
        )


class NetworkUnfitError(RuntimeError):
    """spec.run.requireRoce, and the network preflight showed no RoCE: nothing is trained."""

    outcome = Outcome.NETWORK_UNFIT
    reason = OUTCOMES[Outcome.NETWORK_UNFIT].result_reason

    def __init__(self, message: str, network: NetworkInEffect) -> None:
        super().__init__(message)
        self.network = network


def network_preflight(plan: LaunchPlan) -> NetworkInEffect | None:
    """The plan's network preflight on this rank (every rank runs it), or None when the plan has none;
    raises NetworkUnfitError when the plan requires RoCE and NCCL did not use it."""
    if plan.network_preflight is None:
        return None
    from ftbench_trainer.network.preflight import run_preflight

    network = run_preflight(plan.network_preflight, use_cpu=plan.use_cpu, log_dir=Path(plan.output.dir) / "nccl")
    if plan.network_preflight.require_roce and (problem := roce_problem(network)):
        raise NetworkUnfitError(f"run.requireRoce: {problem}", network)
    return network


def run_worker(plan: LaunchPlan, *, trial: int | None = None) -> TrainerResult:
    """Train once on this rank; never raises for training errors (they become the result)."""
    from ftbench_trainer.measure import distributed

    started = datetime.now(UTC)
    try:
        network = network_preflight(plan)
        if network is not None and plan.network_preflight is not None and plan.network_preflight.only:
            result = network_check_result(plan, network, trial=trial, started=started)
        else:
            result = _train(plan, trial=trial, started=started, network=network)
    except NetworkUnfitError as exc:
        log.error("%s", exc)
        environment = RunEnvironment(
            engine=plan.engine.value,
            world_size=exc.network.ranks,
            device="cpu" if plan.use_cpu else "cuda",
            network=exc.network,
        )
        result = failure_result(exc, trial=trial, started_at=started, environment=environment)
    except Exception as exc:  # any training failure is this rank's result (an outcome), never a lost run
        log.error("training failed:\n%s", traceback.format_exc())
        result = failure_result(exc, trial=trial, started_at=started)
    path = rank_result_path(plan, distributed.rank())
    from ftbench_trainer.report import write_result_file

    write_result_file(result, path)
    return result


def network_check_result(
    plan: LaunchPlan, network: NetworkInEffect, *, trial: int | None, started: datetime
) -> TrainerResult:
    """spec.run.networkPreflight only: the preflight is the whole run. It succeeded with the network
    in its environment and no metrics (no model was loaded, nothing was trained)."""
    import torch

    environment = RunEnvironment(
        engine=plan.engine.value,
        image=os.environ.get(E.FTBENCH_IMAGE, ""),
        torch_version=torch.__version__,
        number_nodes=plan.topology.number_nodes,
        world_size=network.ranks,
        device="cpu" if plan.use_cpu or not torch.cuda.is_available() else "cuda",
        network=network,
    )
    return TrainerResult(
        outcome=Outcome.SUCCEEDED,
        is_valid=OUTCOMES[Outcome.SUCCEEDED].is_valid,
        reason=REASON_NETWORK_CHECKED,
        environment=environment,
        trial=trial,
        started_at=started,
        finished_at=datetime.now(UTC),
    )


def _train(plan: LaunchPlan, *, trial: int | None, started: datetime, network: NetworkInEffect | None) -> TrainerResult:
    from transformers import AutoTokenizer

    from ftbench_trainer.engines import engine_command, run_engine
    from ftbench_trainer.engines.run import EngineRun
    from ftbench_trainer.kubeflow_status import KubeflowStatusReporter
    from ftbench_trainer.measure import distributed
    from ftbench_trainer.measure.callback import MeasureCallback
    from ftbench_trainer.measure.dataset_tokens import mean_dataset_tokens
    from ftbench_trainer.measure.rows import dataset_rows
    from ftbench_trainer.progress_reporter import ProgressReporter
    from ftbench_trainer.report import TeeProgressSink

    model_path = resolve_model(plan)
    dataset_path, dataset_generated = resolve_dataset(plan)
    log.info("dataset %s: %s (%s)", plan.dataset.id, dataset_path, "generated" if dataset_generated else "existing")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    try:
        per_sample = mean_dataset_tokens(
            dataset_path, plan.training.dataset_text_field, tokenizer, plan.training.model_max_length
        )
    except (KeyError, TypeError, ValueError) as exc:
        # Seed note 3 is defined for text rows; chat/vision rows (messages + images) have no
        # single text field: datasetTokensPerSecond is unknown (null, "n/a"), never a measured 0.
        log.warning("dataset tokens (seed note 3) not computable for %s: %s", dataset_path, exc)
        per_sample = None
    kubeflow = KubeflowStatusReporter.from_environ(progress_interval_seconds=plan.output.progress_interval_seconds)
    progress = TeeProgressSink(ProgressReporter.from_plan(plan), events_file=plan.output.events_file, kubeflow=kubeflow)
    # One server per pod, the node's first rank's: the pod declares one metrics port.
    live = LiveMetricsServer.from_plan(plan, distributed.rank()) if distributed.local_rank() == 0 else None
    callback = MeasureCallback(
        plan,
        dataset_tokens_per_sample=per_sample,
        rows_offered=dataset_rows(dataset_path),
        progress=progress,
        live=live,
    )
    if plan.use_cpu and plan.distributed_backend == DistributedBackend.FSDP:
        from ftbench_trainer import cpu_fsdp

        cpu_fsdp.enable()
    run = EngineRun(plan, model_path, dataset_path, callback)
    command = engine_command(run)
    if command:
        log.info("equivalent bare command: %s", command)
    rank0 = distributed.rank() == 0
    try:
        engine_version = run_engine(run)
        if kubeflow is not None and rank0 and callback.metrics is not None:
            kubeflow.finish(callback.metrics, loss=callback.last_loss)
    finally:
        progress.close()
        if live is not None:
            live.close()
    if callback.metrics is None:
        raise RuntimeError("training ended without running on_train_end: no metrics")
    check_fsdp(plan, callback.fsdp)
    check_deepspeed(plan, callback.deepspeed)
    import torch

    environment = RunEnvironment(
        engine=plan.engine.value,
        engine_version=engine_version,
        image=os.environ.get(E.FTBENCH_IMAGE, ""),
        torch_version=torch.__version__,
        transformers_version=_version("transformers"),
        trl_version=_version("trl"),
        peft_version=_version("peft"),
        accelerate_version=_version("accelerate"),
        gpu_name=callback.sampler.gpu_name,
        number_nodes=max(1, callback.world_size // max(1, distributed.local_world_size())),
        world_size=callback.world_size,
        distributed_mode=callback.distributed_mode,
        fsdp=callback.fsdp,
        deepspeed=callback.deepspeed,
        activation_checkpointing=callback.activation_checkpointing,
        attention_implementation=callback.attention_implementation,
        liger_kernel=callback.liger_kernel,
        packing=callback.tokens.packing,
        device="cpu" if plan.use_cpu or not torch.cuda.is_available() else "cuda",
        command=command if len(command) <= COMMAND_LIMIT else command[: COMMAND_LIMIT - 1] + "…",
        dataset_file=dataset_path[-512:],
        dataset_generated=dataset_generated,
        kubeflow_trainer_status=kubeflow.report() if kubeflow is not None and rank0 else None,
        network=network,
    )
    return TrainerResult(
        outcome=Outcome.SUCCEEDED,
        is_valid=OUTCOMES[Outcome.SUCCEEDED].is_valid,
        reason=OUTCOMES[Outcome.SUCCEEDED].result_reason,
        metrics=callback.metrics,
        environment=environment,
        trial=trial,
        started_at=started,
        finished_at=datetime.now(UTC),
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point under `accelerate launch` (one per rank)."""
    parser = argparse.ArgumentParser(prog="python -m ftbench_trainer.worker")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--trial", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = run_worker(LaunchPlan.read(args.plan), trial=args.trial)
    return EXIT_CODES[result.outcome]


if __name__ == "__main__":
    code = main()
    # Leave without C++ static destructors: with gloo threads still alive a rank can abort there
    # ("terminate called without an active exception") after its result is written; everything this
    # process owes (the result file, the log) is written and flushed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
