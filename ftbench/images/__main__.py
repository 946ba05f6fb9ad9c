"""``python -m ftbench.images``: what hack/build-images.sh runs (see ftbench.images.build)."""

from __future__ import annotations

import argparse
import logging
import sys

from ftbench.engines.releases import load_releases
from ftbench.images import build, plan, store


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ftbench.images", description=(build.__doc__ or "").split("\n\n")[0])
    p.add_argument("--all", action="store_true", help="a trainer image for every installable fms-hf-tuning release")
    p.add_argument("--release", action="append", default=[], help="fms-hf-tuning release to build (repeatable)")
    p.add_argument("--only", action="append", default=[], help="build only images whose name contains this")
    p.add_argument("--list", action="store_true", help="print the images and their content keys, build nothing")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[build-images] %(message)s")
    releases = [r.version for r in load_releases().installable] if args.all else (args.release or None)
    if args.list:
        for image in plan.builds({}, releases=releases):
            print(image.ref, image.dockerfile, " ".join(f"{k}={v}" for k, v in sorted(image.args.items())))
        return 0
    try:
        build.build_all(releases, only=args.only)
    except (store.ImageError, OSError) as err:
        print(f"[build-images] {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
