"""Building the project's images without a registry: local bases, then the unmodified Dockerfiles.

``plan`` says what to build and the content key of each image; ``build`` drives buildah (the
bases from Debian packages and the machine's torch wheel, the Dockerfiles with those bases as
build arguments); ``store`` reads what buildah's storage holds (labels, root filesystems) for the
build's cache check, the local kubelet's image mode and the tests. ``hack/build-images.sh`` is
the entry point (``python -m ftbench.images``).
"""
