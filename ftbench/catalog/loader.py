"""Typed views of the catalog YAML files, and seed 002's `model_map` override format."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ftbench.catalog import yaml_data
from ftbench.contracts.enums import DistributedBackend, Engine, Experiment, TorchDtype
from ftbench.contracts.plan import DatasetGenerator
from ftbench.contracts.wire import WireModel


class ModelWeights(WireModel):
    vanilla: str | None = None
    gptq: str | None = None

    @staticmethod
    def is_hub_id(ref: str) -> bool:
        """'org/name' with no leading slash is a Hugging Face id; anything else a path."""
        return not ref.startswith(("/", ".")) and ref.count("/") == 1


class ModelEntry(WireModel):
    name: str
    weights: ModelWeights
    target_modules: tuple[str, ...] | None = None
    layer_class: str | None = None
    num_local_experts: Annotated[int, Field(ge=1)] | None = None
    vision: bool = False
    max_position_embeddings: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="The model's max_position_embeddings (config.json): the longest sequence it was built for. "
        "Unset: not known (no check); the generated model is built for the spec's length.",
    )
    generated: bool = Field(False, description="Built locally on first use (the tiny test model).")
    architecture: dict[str, Any] | None = Field(
        None,
        description="The config.json fields that decide the model's memory (model_type and sizes), copied from "
        "`architectureSource`: what `ftbench predict` traces when the weights' own config.json is not reachable.",
    )
    architecture_source: str | None = Field(None, description="Where `architecture` was read (a URL or repo path).")

    def weights_for(self, variant: Literal["vanilla", "gptq"]) -> str | None:
        return self.weights.gptq if variant == "gptq" else self.weights.vanilla


class DatasetEntry(WireModel):
    name: str
    kind: Literal["text-chars", "text-tokens", "vision"]
    entries: Annotated[int, Field(ge=1)]
    chars: int | None = None
    min_tokens: int | None = None
    image_width: int | None = None
    image_height: int | None = None
    prompt_tokens_min: Annotated[int, Field(ge=0)] | None = Field(
        None,
        description="A lower bound on the tokens of every entry's prompt (up to and including the response "
        "template), for tokenizers that split at spaces: a modelMaxLength at or below it truncates every "
        "response away, so nothing is left to train on. Unset: not known (no check).",
    )
    description: str = ""

    def generator(self) -> DatasetGenerator:
        """How the trainer generates this dataset (the plan carries it: the trainer reads no catalog)."""
        kinds = {"text-chars": "chars", "text-tokens": "tokens", "vision": "vision"}
        return DatasetGenerator(kind=kinds[self.kind], entries=self.entries, chars=self.chars,  # type: ignore[arg-type]
                                min_tokens=self.min_tokens, width=self.image_width, height=self.image_height)  # fmt: skip


class ExperimentFixed(WireModel):
    """What an experiment fixes in the training itself (seed 001's GPTQ-LoRA: float16, fms-acceleration's
    kernels), typed when the catalog loads so the plan copies values instead of parsing strings. The
    fields are fms-hf-tuning's flags of the same names, as the catalog spells them."""

    fp16: bool = False
    fast_kernels: tuple[bool, bool, bool] | None = Field(
        None, description="fms-acceleration's --fast_kernels default; spec.fastKernels overrides it."
    )
    fused_lora: tuple[str, ...] | None = Field(None, description="--fused_lora: the base layer kind, then 'true'.")
    auto_gptq: tuple[str, ...] | None = Field(None, description="--auto_gptq: the GPTQ kernel.")

    def flags(self) -> dict[str, object]:
        """What this experiment sets, by the fms-hf-tuning flag each one is (the docs' table)."""
        return self.model_dump(mode="json", exclude_defaults=True)


class ExperimentEntry(WireModel):
    name: Experiment
    method: Literal["full", "lora", "gptq-lora", "pt"]
    peft_method: Literal["none", "lora", "pt"]
    weights: Literal["vanilla", "gptq"]
    description: str
    torch_dtypes: tuple[TorchDtype, ...]
    default_torch_dtype: TorchDtype
    multi_node: bool
    trials: Annotated[int, Field(ge=1)] = 1
    max_steps: int | None = None
    backends: tuple[DistributedBackend, ...] = (
        DistributedBackend.FSDP,
        DistributedBackend.DDP,
        DistributedBackend.NONE,
        DistributedBackend.DEEPSPEED,
    )
    engines: tuple[Engine, ...] = (Engine.FMS_HF_TUNING, Engine.TRL)
    lora: bool = False
    allowed: tuple[str, ...] | None = Field(
        None, description="Optional spec fields the user may set; None means all of them."
    )
    fixed: ExperimentFixed = Field(default_factory=ExperimentFixed)


class Catalog(BaseModel):
    """Everything the rules, the plan and the docs know about models, datasets and experiments."""

    model_config = ConfigDict(frozen=True)

    models: dict[str, ModelEntry]
    datasets: dict[str, DatasetEntry]
    experiments: dict[Experiment, ExperimentEntry]
    # {model: {dataset: {prompt tokens: entries}}} (prompt_tokens.yaml, generated from the trainer's own
    # tokenizer and dataset generator: ftbench_trainer.measure.prompt_table).
    prompt_tokens: dict[str, dict[str, dict[int, int]]] = {}

    def prompt_lengths(self, model: str, dataset: str) -> dict[int, int] | None:
        """How many entries of `dataset` have each prompt length under `model`'s tokenizer; None where not known
        (the model's tokenizer is not one ftbench builds, or the dataset is not generated in characters)."""
        entry = self.models.get(model)
        if entry is None or not entry.generated:  # a model map may point the name at other weights
            return None
        return self.prompt_tokens.get(model, {}).get(dataset)

    def with_model_map(self, model_map: dict[str, dict[str, str] | str]) -> Catalog:
        """Apply a seed-002 `model_map` ({name: {Vanilla: ref, GPTQ-Quantized: ref}} or ado's
        shorthand {name: ref}, which names the Vanilla weights) on top."""
        models = dict(self.models)
        for name, variants in model_map.items():
            current = models.get(name) or ModelEntry(name=name, weights=ModelWeights())
            weights = current.weights.model_copy(update=_parse_variants(name, variants))
            models[name] = current.model_copy(update={"weights": weights})
        return self.model_copy(update={"models": models})


_VARIANT_KEYS = {"vanilla": "vanilla", "gptq-quantized": "gptq", "qptq-quantized": "gptq", "gptq": "gptq"}


def _parse_variants(name: str, variants: Any) -> dict[str, str]:
    if isinstance(variants, str) and variants:
        # ado's shorthand `name: org/id` (or a path) names the Vanilla weights.
        return {"vanilla": variants}
    if not isinstance(variants, dict):
        raise ValueError(
            f"model_map.{name}: expected a Hugging Face id or path (ado's shorthand) or a mapping like "
            f"{{Vanilla: org/model, GPTQ-Quantized: path}}, got {variants!r}"
        )
    parsed: dict[str, str] = {}
    for key, ref in variants.items():
        field = _VARIANT_KEYS.get(str(key).lower())
        if field is None:
            raise ValueError(f"model_map.{name}.{key}: unknown weights type; use Vanilla or GPTQ-Quantized (seed 002)")
        if not isinstance(ref, str) or not ref:
            raise ValueError(f"model_map.{name}.{key}: expected a Hugging Face id or a path, got {ref!r}")
        parsed[field] = ref
    return parsed


PROMPT_TOKENS_FILE: Final = Path(str(files("ftbench.catalog").joinpath("data", "prompt_tokens.yaml")))


def _read(name: str) -> dict[str, Any]:
    return yaml_data.load(files("ftbench.catalog").joinpath("data", name).read_text())


@cache
def load_catalog() -> Catalog:
    """The catalogs shipped in the package (cached: they are immutable)."""
    models = {n: ModelEntry(name=n, **v) for n, v in _read("models.yaml")["models"].items()}
    datasets = {n: DatasetEntry(name=n, **v) for n, v in _read("datasets.yaml")["datasets"].items()}
    experiments = {
        Experiment(n): ExperimentEntry(name=n, **v) for n, v in _read("experiments.yaml")["experiments"].items()
    }
    prompts = _read(PROMPT_TOKENS_FILE.name)["promptTokens"]
    return Catalog(models=models, datasets=datasets, experiments=experiments, prompt_tokens=prompts)


def load_model_map(path: str | Path) -> dict[str, dict[str, str] | str]:
    """Read a model map file: either the bare mapping or seed 002's `model_map:` key."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    if isinstance(data, dict) and "model_map" in data:
        data = data["model_map"]
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a model map is a mapping of model name to weights")
    return data
