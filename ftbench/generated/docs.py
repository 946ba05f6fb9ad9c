"""Reference docs generated from the code that defines the behaviour, so they cannot drift from it.

Each page comes from one source of truth:
- the CRD references from the CRD's own OpenAPI schema (`crd_docs`), i.e. exactly what the
  API server checks and what `kubectl explain fte.spec` prints, plus the cross-field rules;
- the experiments, models and datasets reference from the catalogs;
- the measured properties from `ftbench.contracts.results` (the trainer's result schema);
- the cluster profile reference from `ftbench.api.profile.ClusterProfile`.

Pure functions returning markdown; `ftbench docs -o docs` writes them and
tests/ship/test_docs.py fails when the committed copies are stale.
"""

from __future__ import annotations

import json

import yaml
from pydantic import BaseModel

from ftbench.api.crd import model_schema
from ftbench.api.profile import ClusterProfile
from ftbench.api.status import Stability
from ftbench.catalog import Catalog, load_catalog
from ftbench.contracts.enums import Engine
from ftbench.contracts.environment import RunEnvironment
from ftbench.contracts.export import json_schemas
from ftbench.contracts.results import EXIT_FAILED, EXIT_GPU_OOM, EXIT_INVALID_PLAN, EXIT_OK, Metrics
from ftbench.generated.crd_docs import crd_reference, sweep_reference
from ftbench.generated.markdown import HEADER, cell, code, schema_sections, table

REFERENCE_DIR = "reference"

# Unit suffixes of metric names (results.py names every metric with its unit at the end).
_UNITS = (
    ("Percent", "%"),
    ("Seconds", "s"),
    ("Watts", "W"),
    ("Bytes", "bytes"),
    ("PerSecond", "1/s"),
    ("PeakFlops", "FLOP/s"),
    ("ModelFlops", "FLOP"),
)


def experiments_reference(catalog: Catalog | None = None) -> str:
    """The experiments, and the models and datasets they can use."""
    catalog = catalog or load_catalog()
    parts = [
        HEADER.format(source="ftbench/catalog/data (experiments.yaml, models.yaml, datasets.yaml)"),
        "# Experiments, models and datasets\n\n",
        "`spec.experiment` picks one of seed 001's experiments; `spec.model` and `spec.datasetId` name "
        "entries of the catalogs below (`ftbench catalog ...` prints the same). A cluster profile's "
        "`modelMap` adds or overrides models in seed 002's `model_map` format.\n\n",
        "## Experiments\n\n",
    ]
    for entry in catalog.experiments.values():
        allowed = "all" if entry.allowed is None else ", ".join(code(a) for a in entry.allowed) or "none"
        fixed = ", ".join(f"{code(k)}: {code(json.dumps(v))}" for k, v in entry.fixed.flags().items()) or "none"
        rows = [
            ("Method", code(entry.method)),
            ("PEFT method", code(entry.peft_method)),
            ("Weights", code(entry.weights)),
            ("torchDtype", ", ".join(code(d.value) for d in entry.torch_dtypes)),
            ("Default torchDtype", code(entry.default_torch_dtype.value)),
            ("Multi-node", "yes" if entry.multi_node else "no (one node)"),
            ("Trials", str(entry.trials)),
            ("Steps per trial", str(entry.max_steps) if entry.max_steps else "`spec.maxSteps` / `numTrainEpochs`"),
            ("distributedBackend", ", ".join(code(b.value) for b in entry.backends)),
            ("Engines", ", ".join(code(e.value) for e in entry.engines)),
            ("LoRA parameters", "r, loraAlpha, targetModules" if entry.lora else "not accepted"),
            ("Optional parameters allowed", allowed),
            ("Fixed trainer arguments", fixed),
        ]
        parts += [
            f"### {entry.name.value}\n\n{cell(entry.description)}\n\n",
            table(("Property", "Value"), [(k, cell(v)) for k, v in rows]),
            "\n",
        ]
    model_rows = [
        (
            code(m.name),
            code(m.weights.vanilla) if m.weights.vanilla else "",
            code(m.weights.gptq) if m.weights.gptq else "",
            ", ".join(code(t) for t in m.target_modules or ()),
            code(m.layer_class) if m.layer_class else "",
            str(m.num_local_experts or ""),
            "generated locally" if m.generated else ("vision" if m.vision else ""),
        )
        for m in catalog.models.values()
    ]
    dataset_rows = [
        (
            code(d.name),
            code(d.kind),
            str(d.entries),
            str(d.chars or ""),
            str(d.min_tokens or ""),
            f"{d.image_width}x{d.image_height}" if d.image_width else "",
            cell(d.description),
        )
        for d in catalog.datasets.values()
    ]
    parts += [
        "## Models\n\n",
        "Weights are a Hugging Face id (`org/name`) or a path under the cluster profile's "
        "`storage.modelRoot`. GPTQ weights are what GPTQ-LoRA loads. Target modules are the LoRA "
        "default when `spec.targetModules` is unset; the layer class is what FSDP wraps.\n\n",
        table(
            ("Model", "Vanilla weights", "GPTQ weights", "LoRA target modules", "Layer class", "Experts", "Notes"),
            model_rows,
        ),
        "\n## Datasets\n\n",
        "Generated on first use into the profile's `storage.dataDir` (seed 002's artificial datasets).\n\n",
        table(("Dataset", "Kind", "Entries", "Chars", "Min tokens", "Image", "Description"), dataset_rows),
    ]
    return "".join(parts)


def _unit(alias: str) -> str:
    for suffix, unit in _UNITS:
        if alias.endswith(suffix):
            return unit
    return ""


def _model_rows(model: type[BaseModel], *, units: bool) -> list[tuple[str, ...]]:
    rows = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        row = [code(alias), code(name)]
        if units:
            row.append(_unit(alias))
        row.append(cell(field.description or ""))
        rows.append(tuple(row))
    return rows


def measured_properties_reference() -> str:
    """What a run reports: `status.results` (Metrics), `status.stability`, `status.environment`."""
    parts = [
        HEADER.format(source="ftbench/contracts/results.py and ftbench/api/status.py"),
        "# Measured properties\n\n",
        "A succeeded run's metrics appear in `status.results` (and in `ftbench run`'s table). Names "
        "are seed 001's measured properties in camelCase with the unit at the end; the Python name is "
        "the snake_case form the trainer's result JSON can also be read with. Exact definitions and "
        "formulas (sampling, warmup exclusion, MFU) are in [measurements](../measurements.md).\n\n",
        "GPU values are 0 when no GPU is used. Per-GPU values are averaged over the run; min/avg/max "
        "are across GPUs (seed 001 note 1). CPU values are for the training processes, 100 % = one "
        "core (note 2).\n\n",
        "## status.results\n\n",
        table(("Property", "Python name", "Unit", "Definition"), _model_rows(Metrics, units=True)),
        "\n## status.stability (finetune_full_stability-v1.0.0)\n\n",
        table(("Property", "Python name", "Definition"), _model_rows(Stability, units=False)),
        "\n## status.environment\n\n",
        "What actually ran, read at run time (not copied from the spec).\n\n",
        table(("Property", "Python name", "Definition"), _model_rows(RunEnvironment, units=False)),
        "\n## Validity and outcome\n\n",
        "As seed 001 defines `is_valid`: an invalid spec and a run that ran out of GPU memory "
        "(`torch.cuda.OutOfMemoryError`, `CUDA error: an illegal memory access`) are valid "
        "measurements of an infeasible point: `isValid: false`, phase `Invalid`. Any other error is "
        "`Failed`: no properties, not even `isValid`, and the run may be retried.\n\n",
        table(
            ("Trainer exit code", "Meaning"),
            [
                (code(EXIT_OK), "succeeded, metrics reported"),
                (code(EXIT_GPU_OOM), "GPU out of memory (phase `Invalid`, `isValid: false`)"),
                (
                    code(EXIT_INVALID_PLAN),
                    "the trainer rejected its launch plan (mismatched image and ftbench version, or a bug)",
                ),
                (code(EXIT_FAILED), "any other failure (phase `Failed`)"),
            ],
        ),
    ]
    return "".join(parts)


def cluster_profile_reference() -> str:
    """Every ClusterProfile field, and the default profile as YAML."""
    schema = model_schema(ClusterProfile, keep_defaults=True)
    default = yaml.safe_dump(ClusterProfile().to_wire(), sort_keys=False, width=120)
    parts = [
        HEADER.format(source="ftbench/api/profile.py (ClusterProfile)"),
        "# Cluster profile reference\n\n",
        "Everything cluster-specific (images, GPU resource and labels, storage, RoCE, which Kubernetes "
        "features exist) lives in one cluster profile, never in experiments. The operator reads it from "
        "the Helm chart's `clusterProfile` value (a ConfigMap); the CLI from `--profile FILE`. "
        "An empty profile means a plain GPU cluster with the defaults below. Example: "
        "`examples/profiles/roce-cluster.yaml`.\n\n",
        *(s + "\n" for s in schema_sections(schema, "profile")),
        "## Defaults\n\n```yaml\n",
        default,
        "```\n",
    ]
    return "".join(parts)


def fms_releases_reference() -> str:
    """Every offered fms-hf-tuning release: stack, API class, image, what CI runs for it, what it cannot do."""
    from ftbench.api.profile import Images
    from ftbench.engines.flags import RENDERED_FLAGS, known_flags
    from ftbench.engines.releases import load_releases

    releases = load_releases()
    matrix = releases.matrix()
    stack_names = ("transformers", "trl", "peft", "accelerate", "datasets", "numpy")
    rows, images = [], []
    anywhere = set().union(*(known_flags(r.version) for r in releases.installable))
    for r in releases.releases:
        image = Images().image_for(Engine.FMS_HF_TUNING, r.version)
        if not r.installable:
            rows.append((r.version, r.api, *("-" for _ in stack_names), "-", f"not installable: {r.reason}"))
            continue
        stack = r.stack()
        runs = matrix[r.version]
        missing = [f for f in RENDERED_FLAGS if f in anywhere and f not in known_flags(r.version)]
        limits = [f"{m}: {why}" for m, why in r.defects.items()] + [f"no `{f}`" for f in missing]
        rows.append((r.version + (" (default)" if r.version == releases.default else ""), r.api,
                     *(stack.get(n, "-") for n in stack_names), ", ".join(runs), "; ".join(limits) or "-"))  # fmt: skip
        images.append((r.version, code(image), r.seed_torch, code(releases.base_images[r.seed_torch])))
    parts = [
        HEADER.format(source="ftbench/engines/data (fms-releases.yaml, locks/, fms-flags.yaml)"),
        "# fms-hf-tuning releases\n\n",
        "Read from the release catalog, each release's lock and each release's own parser. How releases are "
        "installed, adapted and tested, and how to add one: [engines](../engines.md).\n\n",
        "## Stack and what CI runs\n\n",
        f"Each release's pinned stack (its lock). Environments here run torch {releases.cpu_torch} (CPU) in place "
        "of the seed's torch. *CI runs* lists the methods the release matrix trains on the tiny model in every CI "
        "run (`tests/trainer/test_fms_releases.py`); *limits* are refused by validation with the reason.\n\n",
        table(("Release", "API", *stack_names, "CI runs", "Limits"), rows),
        "\n## Images\n\n",
        "`Dockerfile.trainer --build-arg ENGINE=fms-hf-tuning --build-arg FMS_HF_TUNING_VERSION=<release> "
        "--build-arg BASE_IMAGE=<base>` installs the release's lock on the base image's torch (seed 001's torch "
        "for the release). Tags as the default cluster profile resolves them:\n\n",
        table(("Release", "Tag", "torch", "BASE_IMAGE"), images),
    ]
    return "".join(parts)


def generate_all(catalog: Catalog | None = None) -> dict[str, str]:
    """Relative path (under the docs directory) -> content, for every generated page."""
    catalog = catalog or load_catalog()
    return {
        f"{REFERENCE_DIR}/crd.md": crd_reference(catalog),
        f"{REFERENCE_DIR}/sweep-crd.md": sweep_reference(catalog),
        f"{REFERENCE_DIR}/experiments.md": experiments_reference(catalog),
        f"{REFERENCE_DIR}/measured-properties.md": measured_properties_reference(),
        f"{REFERENCE_DIR}/cluster-profile.md": cluster_profile_reference(),
        f"{REFERENCE_DIR}/fms-releases.md": fms_releases_reference(),
        **{
            f"{REFERENCE_DIR}/schemas/{name}": json.dumps(schema, indent=2) + "\n"
            for name, schema in json_schemas().items()
        },
    }
