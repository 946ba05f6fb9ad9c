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

# Kubernetes' own name rules, as the API server checks them (apimachinery's validation package):
# an object name (RFC 1123 subdomain), a qualified name (label and annotation keys: an optional
# DNS-subdomain prefix and '/', then up to 63 characters), an extended resource name (a qualified
# name with its prefix: no prefix means kubernetes.io, which holds no extended resources), a container image repository (the distribution reference grammar:
# an optional registry host, then lowercase path components) and an image tag.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
QUALIFIED_NAME = rf"^({_DOMAIN}/)?{_NAME}$"
RESOURCE_NAME = rf"^{_DOMAIN}/{_NAME}$"
_PATH_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_REGISTRY = r"([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)+|localhost)(:[0-9]+)?/"
IMAGE_REPOSITORY = rf"^({_REGISTRY})?{_PATH_COMPONENT}(/{_PATH_COMPONENT})*$"
IMAGE_TAG = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"

#: An object name: a ServiceAccount, a PVC, a ConfigMap, a Secret.
DnsSubdomain = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
#: A label or annotation key (and a node label a selector names).
QualifiedName = Annotated[str, Field(min_length=1, max_length=317, pattern=QUALIFIED_NAME)]
#: A label value (empty is one).
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
#: An extended resource a pod requests (nvidia.com/gpu, nvidia.com/roce_gdr).
ResourceName = Annotated[str, Field(max_length=317, pattern=RESOURCE_NAME)]
#: A memory quantity (64Gi).
Quantity = Annotated[str, Field(max_length=32, pattern=QUANTITY)]

#: What each pattern means, for an error message a user can act on (a regular expression is not one).
PATTERN_WORDS: dict[str, str] = {
    DNS_LABEL: "a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit",
    DNS_SUBDOMAIN: "an object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
    QUANTITY: "a quantity such as 64Gi, 512Mi or 2",
    LABEL_VALUE: "a label value: at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or "
    "digit (or empty)",
    QUALIFIED_NAME: "a label key: an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' and '.', "
    "starting and ending with a letter or digit",
    RESOURCE_NAME: "an extended resource name: a DNS prefix, '/', then a name (e.g. nvidia.com/gpu)",
    IMAGE_REPOSITORY: "an image repository: an optional registry host (and port), then lowercase path components "
    "(e.g. ghcr.io/ftbench/trainer)",
    IMAGE_TAG: "an image tag: letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'",
    IDENTIFIER: "a name: a letter or '_', then letters, digits, '_', '.' and '-'",
    CATALOG_KEY: "a catalog name: letters, digits, '_', '.', '/' and '-', starting with a letter or digit",
}
