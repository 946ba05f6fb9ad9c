"""The patterns and upper bounds the API's free-text and numeric fields are held to.

Shared by the experiment spec, its run settings and the cluster profile, so the CRD refuses the
same values at `kubectl apply` wherever a field of the same kind appears.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# Kubernetes names for resources (RFC 1123 label), used for the queue and priority class names.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
# Free text that reaches a trainer command line, a label or a node selector is held to a pattern
# and a length here, so the CRD refuses it at `kubectl apply` and validation names the field.
# None of these patterns lets a value start with '-': a value can never be read as a flag.
# A Kubernetes label value (gpuModel becomes a node selector value); empty is a valid label value.
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# A Python identifier-like name: module names (LoRA targets, "all-linear"), dataset columns.
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
# A catalog key: model names may hold an organisation ("org/name"), as Hugging Face ids do.
CATALOG_KEY = r"^[A-Za-z0-9][A-Za-z0-9_./-]*$"
IDENTIFIER_MAX = 128
MAX_TARGET_MODULES = 64
# Upper bounds that no real run reaches, so an absurd value is refused instead of planned.
MAX_GPUS = 1024
MAX_BATCH = 65_536
MAX_STEPS = 10_000_000
MAX_EPOCHS = 10_000
MAX_SECONDS = 31_536_000  # one year
MAX_REPEATS = 10  # runs of the same work (an experiment's repeats, a sweep point's)

# The field types made of them that several fields share.
#: A module name or a dataset column (LoRA targets, datasetTextField, datasetImageField).
Identifier = Annotated[str, Field(min_length=1, max_length=IDENTIFIER_MAX, pattern=IDENTIFIER)]
#: A PriorityClass name (a run's, or one the cluster profile allows).
PriorityClassName = Annotated[str, Field(max_length=253, pattern=DNS_LABEL)]
