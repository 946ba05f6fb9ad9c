"""Names the image builds share with the Dockerfiles, the local kubelet and the image tests.

The Dockerfiles, ``hack/build-images.sh`` (through ``python -m ftbench.images``), buildah and the
tests cannot share Python objects; they share these strings. ``Dockerfile.trainer`` spells the
label keys and the build arguments itself, and ``tests/ship/test_images.py`` checks that it spells
these.
"""

from __future__ import annotations

# Labels on the images (OCI config). Dockerfile.trainer sets the engine and release ones.
ENGINE_LABEL = "io.ftbench.engine"
FMS_VERSION_LABEL = "io.ftbench.fms-hf-tuning-version"
# Set by the build script: the content hash an image was built from (see ftbench.images.plan).
CACHE_KEY_LABEL = "io.ftbench.cache-key"

# Build arguments of the Dockerfiles.
ARG_PYTHON_IMAGE = "PYTHON_IMAGE"
ARG_BASE_IMAGE = "BASE_IMAGE"
ARG_ENGINE = "ENGINE"
ARG_FMS_VERSION = "FMS_HF_TUNING_VERSION"
ARG_FMS_ACCELERATION = "FMS_ACCELERATION"
ARG_FLASH_ATTN = "FLASH_ATTN"
ARG_LIGER_KERNEL = "LIGER_KERNEL"

# The users the images run as (Dockerfile USER; the cluster profile's security.runAsUser and the
# chart's securityContext use the same numbers).
OPERATOR_UID = 10001
TRAINER_UID = 1000

# buildah's storage driver everywhere (build, kubelet image mode): overlay storage needs kernel
# support that CI machines may lack; vfs works everywhere, at the cost of full copies.
STORAGE_DRIVER = "vfs"
