"""The fast value check (``plain_json``) passes a manifest only where the full walk finds
nothing to report."""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest

from toolcat.registry.limits import MAX_DEPTH, NotJson, plain_json, walk_values

from ..helpers import stable_id, toolkit_data

ODD: list[Any] = [
    float("nan"),
    float("inf"),
    2**64,
    -(2**63) - 1,
    "\ud800",
    datetime.date(2026, 1, 1),
    NotJson("NaN", "NaN is not a JSON number"),
    {1: "a"},
    {"\udfff": 1},
    b"bytes",
]
FINE: list[Any] = [0, -(2**63), 2**63 - 1, 1.5, True, None, "é", "plain", [], {}, [1, "a"]]


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"x": value}
    return value


def test_a_valid_manifest_takes_the_fast_path() -> None:
    data = toolkit_data()
    assert plain_json(data) and not list(walk_values(data))


@pytest.mark.parametrize("odd", ODD, ids=stable_id)
def test_a_value_the_walk_reports_is_never_passed(odd: Any) -> None:
    rng = random.Random(repr(odd))
    for _ in range(20):
        data = toolkit_data()
        node: Any = data["tools"][rng.randrange(2)]
        key = rng.choice(["description", "parameters", "examples", "tags"])
        if key == "parameters":
            node = node["parameters"]["properties"]
            key = "city"
        node[key] = rng.choice([odd, [odd], {"k": odd}])
        assert list(walk_values(data))
        assert not plain_json(data)


@pytest.mark.parametrize("fine", FINE, ids=stable_id)
def test_plain_values_pass(fine: Any) -> None:
    data = toolkit_data(extra_value=fine)
    assert plain_json(data) and not list(walk_values(data))


@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
def test_the_depth_bound_agrees_with_the_walk(levels: int) -> None:
    data = nested(levels)
    if plain_json(data):
        assert not list(walk_values(data))
    assert bool(list(walk_values(data))) == (levels > MAX_DEPTH)
    assert plain_json(data) == (levels <= MAX_DEPTH)


def test_a_tuple_goes_to_the_walk() -> None:
    data = toolkit_data(extra_value=(1, "a"))
    assert not plain_json(data) and not list(walk_values(data))  # the walk accepts it
