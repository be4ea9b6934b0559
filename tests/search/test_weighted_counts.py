"""``lexical_index._weighted`` counts each column once and repeats its words: the same
length, counts and order of terms (which the packed tools keep) as counting the repeated
body, over seeded texts with every kind of whitespace ``str.split`` knows."""

from __future__ import annotations

import random
from collections import Counter

from toolcat.search import lexical_index
from toolcat.search.bm25 import DEFAULT_WEIGHTS

SPACES = [" ", "  ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x85", "\xa0", "\u2003", "\u3000"]
WORDS = ["get", "forecast", "city", "ledger", "x", "é", "北京", "\x01", "get_x", "1"]


def _reference(texts: list[str], times: list[int]) -> tuple[int, list[tuple[str, int]], int]:
    """What ``_weighted`` counted before: the repeated body split whole."""
    length = len(" ".join(texts).split())
    tokens = lexical_index._body(times, texts).split()
    return length, list(Counter(tokens).items()), len(tokens)


def _text(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return rng.choice(["", " ", "\u3000\n"])
    parts = [rng.choice(SPACES) if rng.random() < 0.3 else ""]
    for _ in range(rng.randrange(1, 12)):
        parts += [rng.choice(WORDS), rng.choice(SPACES)]
    return "".join(parts[:-1] if rng.random() < 0.5 else parts)


def test_weighted_counts_as_the_repeated_body_did() -> None:
    rng = random.Random(20261130)
    weights_list = [DEFAULT_WEIGHTS, (1.0, 1.0, 1.0, 1.0, 1.0), (2.0, 0.0, 1.0, 0.5, 3.0)]
    for weights in weights_list:
        times = lexical_index.repeats(weights)
        scale = lexical_index.count_scale(weights)
        for _ in range(2_000):
            texts = [_text(rng) for _ in range(5)]
            length, found, tokens = lexical_index._weighted(texts, weights, times, scale, True)
            assert (length, list(found.items()), tokens) == _reference(texts, times), texts
