"""``canonical_json`` keeps one encoder, and ``canonical_tree_json`` (for pydantic's dumps) one C
encoder without the cycle check: both give the text ``json.dumps`` with its options gives, so
every content hash stored before stays the one computed now, and ``canonical_json`` raises
what it raises for what JSON cannot hold."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from toolcat.models import canonical_json, canonical_tree_json


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


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_other_containers_and_keys_give_json_dumps_text_or_its_error() -> None:
    from collections import OrderedDict

    class Sub(dict):  # type: ignore[type-arg]
        pass

    values: list[Any] = [
        ("t", 1, [2, (3,)]),
        OrderedDict([("b", 1), ("a", 2)]),
        Sub(z=1, a=Sub(y=2)),
        {1: "int", 2: "keys"},
        {1.5: 3, 2.5: 4},
        "top-level text",
        12,
        None,
    ]
    for value in values:
        assert canonical_json(value) == _dumps(value)
    for bad in ({"a": 1, 2: "mixed key types"}, {"a": object()}, [b"bytes"], {1, 2}):
        with pytest.raises(TypeError) as expected:
            _dumps(bad)
        with pytest.raises(TypeError) as got:
            canonical_json(bad)
        assert str(got.value) == str(expected.value)


def test_a_cycle_raises_what_json_dumps_raises_and_deep_values_too() -> None:
    looped: dict[str, Any] = {"a": [1]}
    looped["a"].append(looped)
    with pytest.raises(ValueError, match="Circular reference detected"):
        canonical_json(looped)
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        canonical_json(deep)
    assert canonical_json({"after": "still works"}) == '{"after":"still works"}'


def test_threads_share_the_encoder() -> None:
    rng = random.Random(8)
    values = [_value(rng) for _ in range(200)]
    expected = [_dumps(v) for v in values]

    def encode_all(_: int) -> list[str]:
        return [canonical_json(v) for v in values for _ in range(5)][::5]

    with ThreadPoolExecutor(8) as pool:
        assert all(got == expected for got in pool.map(encode_all, range(8)))


def test_canonical_tree_json_is_the_text_of_json_dumps_for_trees() -> None:
    rng = random.Random(20261201)
    for _ in range(3_000):
        tree = {"v": _value(rng), "w": [_value(rng)]}
        assert canonical_tree_json(tree) == _dumps(tree)


def test_threads_share_the_tree_encoder() -> None:
    rng = random.Random(9)
    trees = [{"v": _value(rng)} for _ in range(200)]
    expected = [_dumps(t) for t in trees]

    def encode_all(_: int) -> list[str]:
        return [canonical_tree_json(t) for t in trees]

    with ThreadPoolExecutor(8) as pool:
        assert all(got == expected for got in pool.map(encode_all, range(8)))
