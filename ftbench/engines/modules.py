"""Which modules each catalog architecture has in each engine stack: what LoRA can target, what FSDP can wrap.

`targetModules: [foo_proj]` or an FSDP layer class the model does not have used to pass validation and
fail at run time (peft: "Target modules ... not found"; accelerate: "Could not find the transformer layer
class"), and a list with one wrong name among right ones trained fewer adapters than asked without a word.
Validation runs where torch is not (the operator image), so the names are read ahead of time:
`python -m ftbench.engines.modules --write` builds every catalog architecture on the meta device (no
weights, no download) in each stack's interpreter (this environment for trl, each installable release's
environment) and writes data/modules.yaml, keyed by the stack's transformers version; `--check` (a test)
says whether it is stale. The rules `engine.target-modules` and `engine.layer-class`
(ftbench.api.rules_modules) refuse a name the spec's model does not have in its stack.

Each catalog model with an architecture is built as it is (models sharing a decoder class differ: granite-4.0's
dense variants have no Mamba or expert modules); a model without one is judged by the union of its class's
models. Vision models are left out (their towers add modules this table does not list), as is an
architecture a stack's transformers cannot build (then nothing is judged there).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import yaml

from ftbench.catalog import Catalog, load_catalog, yaml_data
from ftbench.engines.releases import DATA, TRL_STACK, load_releases, table_main

DATA_FILE = "modules.yaml"
# A decoder class no catalog model has an architecture for: the smallest config that builds it (module
# names do not depend on the sizes).
FALLBACK_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "BloomBlock": {"model_type": "bloom", "hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 256},
}
# Run in a stack's interpreter with {name: architecture}: each architecture's LoRA-capable module paths (layer
# indices as *) and its module classes, or why its transformers cannot build it.
PROBE = r"""
import json, re, sys, torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM
kinds = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d)
try:
    from transformers.pytorch_utils import Conv1D
    kinds += (Conv1D,)
except ImportError:
    pass
out = {}
for name, arch in json.loads(sys.argv[1]).items():
    arch = dict(arch)
    model_type = arch.pop("model_type")
    try:
        config = AutoConfig.for_model(model_type, **arch)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as err:  # this transformers does not know the architecture: recorded, not judged
        out[name] = {"modelType": model_type, "unknown": f"{type(err).__name__}: {err}"[:200]}
        continue
    paths = {re.sub(r"\.\d+(?=\.|$)", ".*", n) for n, m in model.named_modules() if isinstance(m, kinds)}
    classes = {type(m).__name__ for m in model.modules()}
    out[name] = {"modelType": model_type, "targets": sorted(paths), "classes": sorted(classes)}
print(json.dumps({"transformers": transformers.__version__, "models": out}))
"""


def architectures(catalog: Catalog) -> dict[str, dict[str, Any]]:
    """The architecture of every catalog text model that has one (model name -> config fields), and the
    fallback of a decoder class none of them has (keyed by the class)."""
    found = {
        name: dict(model.architecture)
        for name, model in catalog.models.items()
        if not model.vision and model.architecture and "model_type" in model.architecture
    }
    classes = {catalog.models[name].layer_class for name in found}
    found |= {layer_class: arch for layer_class, arch in FALLBACK_ARCHITECTURES.items() if layer_class not in classes}
    return dict(sorted(found.items()))


def probe(python: str, models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    env = {"PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [python, "-c", PROBE, json.dumps(models)], capture_output=True, text=True, check=True, env=env, timeout=900
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def generate() -> str:
    """Probe this environment (trl) and one environment per transformers version the release locks pin."""
    from ftbench.engines.envs import ensure_env
    from ftbench.engines.locks import lock_path
    from ftbench.engines.releases import parse_lock

    pinned = {r.version: parse_lock(lock_path(r).read_text())["transformers"] for r in load_releases().installable}
    first = {version: release for release, version in reversed(pinned.items())}  # the oldest release per version
    pythons = [sys.executable, *(str(ensure_env(release)) for release in first.values())]
    models = architectures(load_catalog())
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda python: probe(python, models), pythons))
    by_version = {a["transformers"]: a["models"] for a in answers}
    stacks = {TRL_STACK: answers[0]["transformers"], **pinned}
    header = "# Generated by `python -m ftbench.engines.modules --write`: each stack's module names per architecture.\n"
    return header + yaml.safe_dump({"stacks": stacks, "transformers": by_version}, sort_keys=True, width=120)


@cache
def load_modules() -> dict[str, Any]:
    """{stacks: {stack: transformers version}, transformers: {version: {layer class: entry}}}."""
    return dict(yaml_data.load(DATA.joinpath(DATA_FILE).read_text()))


def model_modules(stack: str, model: str, catalog: Catalog) -> dict[str, Any] | None:
    """A catalog model's entry in a stack (modelType, targets, classes): its own architecture's, else the
    union of the models that share its decoder class (a model the catalog has no architecture for); None
    when the stack is not in the table or its transformers cannot build the architecture (not judged)."""
    table = load_modules()
    version = table["stacks"].get(stack)
    entries: dict[str, Any] = table["transformers"].get(version) or {} if version else {}
    entry = entries.get(model)
    if entry is not None:
        return entry if "targets" in entry else None
    layer_class = catalog.models[model].layer_class if model in catalog.models else None
    if layer_class is None or catalog.models[model].vision:
        return None
    same = [e for n, e in entries.items() if _layer_class(n, catalog) == layer_class and "targets" in e]
    if not same:
        return None
    union = {key: sorted({v for e in same for v in e[key]}) for key in ("targets", "classes")}
    return {"modelType": same[0]["modelType"], **union}


def _layer_class(name: str, catalog: Catalog) -> str | None:
    entry = catalog.models.get(name)
    return entry.layer_class if entry is not None else name  # a fallback is keyed by its class


def stack_transformers(stack: str) -> str:
    return str(load_modules()["stacks"][stack])


def targets(target: str, path: str) -> bool:
    """Whether peft's `target_modules` entry `target` selects the module at `path` (layer indices as *): the
    name equals it or ends with "." + it."""
    wanted, parts = target.split("."), path.split(".")
    if len(wanted) > len(parts):
        return False
    return all(p == w or (p == "*" and w.isdigit()) for p, w in zip(parts[-len(wanted) :], wanted, strict=True))


def main(argv: list[str] | None = None) -> int:
    return table_main("ftbench.engines.modules", __doc__, DATA_FILE, generate, argv)


if __name__ == "__main__":
    sys.exit(main())
