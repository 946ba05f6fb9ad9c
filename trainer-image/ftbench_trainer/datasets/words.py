"""The synthetic English every generated row is made of, drawn deterministically from a seed.

Text and vision rows alike take their words from here, so a row depends only on the dataset id,
the seed and the row number (see :func:`seeded_rng`).
"""

from __future__ import annotations

import random
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def sentences() -> tuple[str, ...]:
    """The package's synthetic English sentences (``ftbench_trainer/data/words.txt``)."""
    text = resources.files("ftbench_trainer").joinpath("data/words.txt").read_text(encoding="utf-8")
    return tuple(s for s in text.splitlines() if s and not s.startswith("#"))


def seeded_rng(*parts: object) -> random.Random:
    """A generator seeded by the joined parts (dataset id, seed, row): the same parts, the same text."""
    return random.Random(":".join(str(p) for p in parts))


def text_of_chars(rng: random.Random, n: int) -> str:
    sents = sentences()
    out: list[str] = []
    size = -1
    while size < n:
        s = rng.choice(sents)
        out.append(s)
        size += len(s) + 1
    return " ".join(out)[:n]


def word_count(text: str) -> int:
    return len(text.split())


def words(rng: random.Random, n: int) -> list[str]:
    """At least n words of synthetic sentences, cut at exactly n."""
    out: list[str] = []
    sents = sentences()
    while len(out) < n:
        out += rng.choice(sents).split()
    return out[:n]
