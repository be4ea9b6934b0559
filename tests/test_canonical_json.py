"""``canonical_json`` keeps one encoder: the text ``json.dumps`` with its options gives, so
every content hash stored before stays the one computed now."""

from __future__ import annotations

import json
import random
from typing import Any

from toolcat.models import canonical_json


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 2**63 - 1, -(2**63), 10**30, rng.randrange(-999, 999)])
    if kind == 2:
        return rng.choice([0.0, -0.0, 1e100, 1.5, -3.25e-7, float("nan"), float("inf")])
    if kind in (3, 4, 5):
        chars = ["a", "é", "北", "\n", '"', "\\", "\x00", "\u2028", "\ud800", "😀", "/"]
        return "".join(rng.choice(chars) for _ in range(rng.randrange(8)))
    if kind in (6, 7):
        return {str(_value(rng, 9)): _value(rng, depth + 1) for _ in range(rng.randrange(5))}
    return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]


def test_canonical_json_is_the_text_of_json_dumps() -> None:
    rng = random.Random(20261130)
    for _ in range(3_000):
        value = _value(rng)
        expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert canonical_json(value) == expected
