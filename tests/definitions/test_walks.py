"""Walks over JSON trees in C (``definitions/_walks.c``) answer as their Python does: the
manifest's plain-JSON check, a schema's remote references, a schema's texts for the index.
Whatever the Python would run someone's code on (a subclass, a key that is not a str) the C
declines, and the Python answers."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from toolcat import models
from toolcat.definitions import walks
from toolcat.registry import limits
from toolcat.text import documents

pytestmark = pytest.mark.skipif(walks._walks is None, reason="_walks not compiled")

KEYS = ["properties", "items", "description", "enum", "$ref", "$dynamicRef", "$recursiveRef"]
KEYS += ["type", "a", "\ud800", "é", "名"]
LEAVES: list[Any] = ["#/x", "http://e", "", "x\ud800", "é", "text", "#", "名前", "😀"]
LEAVES += [0, 1, -(2**63), 2**63 - 1, 2**63, -(2**63) - 1, 10**30]
LEAVES += [1.5, float("inf"), float("nan"), -0.0, True, False, None, (1, 2), b"x"]

WALKS: dict[str, Callable[[Any], Any]] = {
    "plain_json": limits.plain_json,
    "remote_references": models.remote_references,
    "schema_texts": lambda tree: list(documents.schema_texts(tree)),
}


def both(walk: Callable[[Any], Any], tree: Any) -> tuple[Any, Any]:
    def answer() -> Any:
        try:
            return ("ok", walk(tree))
        except Exception as e:  # compared, not hidden
            return ("error", type(e), str(e))

    walks.NATIVE = True
    native = answer()
    walks.NATIVE = False
    try:
        return native, answer()
    finally:
        walks.NATIVE = True


def random_tree(rng: random.Random, depth: int = 0) -> Any:
    if depth > 7 or rng.random() < 0.25:
        return rng.choice(LEAVES)
    if rng.random() < 0.5:
        return {rng.choice(KEYS): random_tree(rng, depth + 1) for _ in range(rng.randrange(5))}
    return [random_tree(rng, depth + 1) for _ in range(rng.randrange(5))]


@pytest.mark.parametrize("name", sorted(WALKS))
def test_random_trees_get_the_pythons_answer(name: str) -> None:
    rng = random.Random(7)
    for _ in range(8_000):
        tree = random_tree(rng)
        native, python = both(WALKS[name], tree)
        assert native == python, tree


@pytest.mark.parametrize("name", sorted(WALKS))
@pytest.mark.parametrize("depth", [0, 3, 4, 5, 6, 63, 64, 65, 200])
def test_deep_trees_stop_where_the_python_stops(name: str, depth: int) -> None:
    schema: Any = {"type": "string", "description": "leaf", "$ref": "http://far"}
    for level in range(depth):
        schema = {"properties": {f"p{level}": schema}} if level % 3 else {"items": [schema]}
    native, python = both(WALKS[name], schema)
    assert native == python


def test_plain_json_takes_the_64_bit_range_and_finite_floats_only() -> None:
    for value in (2**63 - 1, -(2**63), 0.0, 1e308, "plain", "é", "名", "😀", None, True):
        assert limits.plain_json({"v": [value]})
    for value in (2**63, -(2**63) - 1, float("nan"), float("-inf"), "\udfff", (1,), 1j):
        assert not limits.plain_json({"v": [value]})
    assert not limits.plain_json({1: "a key that is not a str"})


class Mapping(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise AssertionError("the C never calls a subclass's methods")

    def get(self, *args: Any) -> Any:
        raise AssertionError("the C never calls a subclass's methods")


class Text(str):
    def startswith(self, *args: Any) -> bool:  # type: ignore[override]
        return True


class Key:
    def __hash__(self) -> int:
        return hash("$ref")

    def __eq__(self, other: object) -> bool:
        return True


@pytest.mark.parametrize(
    "tree",
    [
        Mapping({"$ref": "http://x"}),
        {"properties": Mapping({"a": {}})},
        {"properties": {"a": Mapping({"description": "x"})}},
        {"$ref": Text("http://x")},
        {"properties": {"a": {"description": Text("x"), "enum": [Text("y")]}}},
        {Key(): "http://x"},
        {"properties": {Key(): {}}},
        [Mapping()],
    ],
    ids=["dict", "properties", "property", "ref-text", "texts", "key", "name", "in-list"],
)
def test_what_would_run_someones_code_is_declined(tree: Any) -> None:
    native = walks.compiled()
    assert native is not None
    declined = (
        native.remote_references(tree, models.REF_KEYWORDS) is None
        or native.schema_texts(tree, documents.MAX_SCHEMA_DEPTH) is None
    )
    assert declined
    assert not native.plain_json(tree, limits.MAX_DEPTH)


def test_a_schemas_references_and_texts_in_order() -> None:
    schema = {
        "type": "object",
        "$ref": "#/$defs/local",
        "properties": {
            "city": {"type": "string", "description": "The city.", "$ref": "file:///etc"},
            "unit": {"enum": ["metric", 3, "imperial"], "items": {"$dynamicRef": "http://a"}},
            "deep": {"properties": {"inner": {"description": "Inside."}}},
        },
        "items": {"properties": {"x": {}}, "$recursiveRef": ""},
    }
    for native in (True, False):
        walks.NATIVE = native
        try:
            assert models.remote_references(schema) == ["", "http://a", "file:///etc"]
            assert list(documents.schema_texts(schema)) == [
                "city",
                "The city.",
                "unit",
                "metric imperial",
                "deep",
                "inner",
                "Inside.",
                "x",
            ]
        finally:
            walks.NATIVE = True


@pytest.mark.parametrize(
    "args",
    [(), ({}, "64"), ({}, 64, 1)],
)
def test_wrong_arguments_are_a_type_error(args: tuple[Any, ...]) -> None:
    native = walks.compiled()
    assert native is not None
    with pytest.raises(TypeError):
        native.plain_json(*args)
    with pytest.raises(TypeError):
        native.schema_texts(*args)
    with pytest.raises(TypeError):
        native.remote_references({}, ["$ref"])
    with pytest.raises(TypeError):
        native.remote_references({}, (1,))
