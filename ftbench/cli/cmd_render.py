"""`ftbench render FILE`: the Kubernetes objects the operator would create, as YAML.

Lets a user review a run, or `kubectl apply` it on a cluster without the operator. The same
validation as `ftbench validate` runs first; an invalid spec prints its issues and exits 1.
"""

from __future__ import annotations

import argparse
import sys

import yaml

from ftbench.api.profile import catalog_for
from ftbench.api.validation import validate_document
from ftbench.cli.cmd_validate import add_model_map, catalog_from_args, profile_from_arg
from ftbench.cli.documents import read_documents
from ftbench.cli.main import UsageError, non_negative
from ftbench.contracts.enums import Engine, Runtime
from ftbench.contracts.plan import LaunchPlan
from ftbench.engines.fms_args import equivalent_command, sft_trainer_args
from ftbench.render.manifests import manifests_yaml, render_experiment
from ftbench.render.plan import PlanError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("render", help="print the Kubernetes manifests that run an experiment (multi-document YAML)")
    p.add_argument("files", nargs="+", metavar="FILE", help="FineTuneExperiment YAML files (- for stdin)")
    p.add_argument(
        "--runtime",
        choices=[r.value for r in Runtime],
        help="override spec.run.runtime (auto: Job for one node; TrainJob, PyTorchJob or IndexedJob for several, per the profile)",
    )
    p.add_argument("--profile", metavar="FILE", help="cluster profile YAML (default: a plain GPU cluster)")
    p.add_argument("-n", "--namespace", help="namespace of the objects (default: the experiment's, else none)")
    p.add_argument("--attempt", type=non_negative, default=0, help="attempt number in the object names (default 0)")
    add_model_map(p)
    p.add_argument(
        "--command",
        dest="bare_command",
        action="store_true",
        help="instead of manifests, print the bare fms-hf-tuning command (and accelerate config) that trains the same "
        "way, to reproduce a measurement without ftbench",
    )
    p.set_defaults(func=run)


def bare_command(plan: LaunchPlan) -> str:
    """A shell snippet: the node-0 accelerate config (if any) and the `tuning.sft_trainer` command."""
    if plan.engine != Engine.FMS_HF_TUNING:
        raise UsageError("--command: engine trl has no bare command line (ftbench-trainer drives trl's SFTTrainer)")
    dataset = plan.dataset.path or f"{plan.data_dir}/{plan.dataset.id}.jsonl"
    args = sft_trainer_args(plan, dataset_path=dataset)
    lines = [f"# fms-hf-tuning {plan.engine_version}; dataset: {dataset} (`ftbench dataset generate` makes it)"]
    config = None
    if plan.launcher == "accelerate" and plan.accelerate_config is not None:
        config = "accelerate-config.yaml"
        nodes = plan.topology.number_nodes
        if nodes == 1:
            placed = {**plan.accelerate_config, "machine_rank": 0, "num_machines": 1}
            lines += [f"cat > {config} <<'EOF'", yaml.safe_dump(placed, sort_keys=True).rstrip(), "EOF"]
        else:
            lines += _multi_node_config(plan, config, nodes)
    return "\n".join([*lines, equivalent_command(plan, args, config)])


def _multi_node_config(plan: LaunchPlan, config: str, nodes: int) -> list[str]:
    """Each node runs the same snippet with its own rank and node 0's address: accelerate starts
    that node's processes and they meet at main_process_ip:main_process_port."""
    master = (
        f"{plan.rendezvous.master_host} in the IndexedJob's pods" if plan.rendezvous.source == "indexedjob"
        else "MASTER_ADDR in a PyTorchJob's pods, PET_MASTER_ADDR in a TrainJob's"
    )  # fmt: skip
    placed = {
        **(plan.accelerate_config or {}),
        "machine_rank": "@NODE_RANK@",
        "main_process_ip": "@MASTER_ADDR@",
        "main_process_port": plan.rendezvous.port,
        "num_machines": nodes,
    }
    text = yaml.safe_dump(placed, sort_keys=True).rstrip()
    text = text.replace("'@NODE_RANK@'", "${NODE_RANK}").replace("'@MASTER_ADDR@'", "${MASTER_ADDR}")
    return [
        f"# {nodes} nodes: run this on every node, with NODE_RANK its rank (0 to {nodes - 1}) and MASTER_ADDR the "
        f"address of node 0 ({master}); each node starts its {plan.topology.processes_per_node} processes",
        f': "${{NODE_RANK:?set NODE_RANK to the rank of this node, 0 to {nodes - 1}}}" '
        '"${MASTER_ADDR:?set MASTER_ADDR to the address of node 0}"',
        f"cat > {config} <<EOF",
        text,
        "EOF",
    ]


def run(args: argparse.Namespace) -> int:
    profile = profile_from_arg(args.profile)
    catalog = catalog_from_args(args, catalog_for(profile))
    try:
        documents = list(read_documents(args.files))
    except (OSError, ValueError) as err:
        raise UsageError(str(err)) from err
    if not documents:
        raise UsageError("no YAML documents found")
    failed = 0
    for doc in documents:
        body = doc.body
        if args.namespace and isinstance(body, dict):  # checked with the document, as the API server would
            meta = body.get("metadata")
            body = {**body, "metadata": {**(meta if isinstance(meta, dict) else {}), "namespace": args.namespace}}
        if args.runtime and isinstance(body, dict) and isinstance(body.get("spec"), dict):
            spec = body["spec"]
            body = {**body, "spec": {**spec, "run": {**(spec.get("run") or {}), "runtime": args.runtime}}}
        report = validate_document(body, catalog, profile=profile)
        metadata = body.get("metadata") if isinstance(body, dict) else None
        name = (metadata or {}).get("name", "?") if isinstance(metadata, dict) else "?"
        if not report.ok or report.spec is None:
            failed += 1
            print(f"{doc.source}: {name}: invalid", file=sys.stderr)
            for issue in report.issues:
                print(f"  - {issue}", file=sys.stderr)
            continue
        try:
            rendered = render_experiment(
                report.spec,
                catalog,
                profile,
                name=name,
                namespace=args.namespace or (metadata or {}).get("namespace", ""),
                attempt=args.attempt,
            )
        except PlanError as err:
            failed += 1
            print(f"{doc.source}: {name}: cannot render: {err}", file=sys.stderr)
            continue
        if args.bare_command:
            print(bare_command(rendered.plan))
            continue
        print(f"# {doc.source}: {name}: runtime {rendered.runtime.value}")
        for note in rendered.plan.notes:
            print(f"# note: {note}")
        for warning in rendered.warnings:
            print(f"# warning: {warning}")
            print(f"{doc.source}: {name}: warning: {warning}", file=sys.stderr)
        if len(rendered.names.workloads) > 1:
            print("# note: the trial Jobs must run one after another; the operator creates them in sequence")
        print(manifests_yaml(rendered.objects), end="")
    return 1 if failed else 0
