"""Commit subjects a newcomer can scan: one line of at most 72 characters, in the imperative, no trailing period.

Checks every commit after FIRST (the last commit before the rule, issue 62.3); `hack/test.sh` runs it, so CI
does. The detail and the numbers belong in the body. Usage: python hack/check_commits.py [REV_RANGE]
"""

from __future__ import annotations

import subprocess
import sys

FIRST = "d23179f"  # main's last commit before the rule: the long subjects before it stay as they are
LIMIT = 72
# Subjects that describe instead of command ("Adds", "Fixed") read worse in `git log --oneline`.
NOT_IMPERATIVE = ("Adds ", "Added ", "Fixes ", "Fixed ", "Updates ", "Updated ", "Removes ", "Removed ")


def problems(subject: str) -> list[str]:
    out = []
    if len(subject) > LIMIT:
        out.append(f"{len(subject)} characters (at most {LIMIT}: the detail goes in the body)")
    if subject.endswith("."):
        out.append("ends with a period")
    if subject.startswith(NOT_IMPERATIVE):
        out.append("not in the imperative (Add, Fix, Update, ...)")
    if not subject[:1].isupper():
        out.append("does not start with a capital letter")
    return out


def main() -> int:
    revs = sys.argv[1] if len(sys.argv) > 1 else f"{FIRST}..HEAD"
    try:
        log = subprocess.run(["git", "log", "--format=%h %s", revs], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as err:  # a shallow clone without FIRST: nothing to check
        print(f"[commits] cannot read {revs}: {getattr(err, 'stderr', err)}".strip(), file=sys.stderr)
        return 0
    bad = 0
    for line in log.stdout.splitlines():
        sha, _, subject = line.partition(" ")
        for why in problems(subject):
            print(f"[commits] {sha} {subject[:60]}...: {why}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
