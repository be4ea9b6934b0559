"""The fast path of schema checks answers "valid" only where the full meta-schema does."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import fastjsonschema
import pytest

from tests.helpers import BENCH
from toolcat.definitions.schema_draft7 import DRAFT7_META_SCHEMA
from toolcat.definitions.schema_draft7_plain import plainly_valid
from toolcat.models import Tool

META = fastjsonschema.compile(DRAFT7_META_SCHEMA, use_default=False)

# Values a mutation puts anywhere in a schema: each is wrong for some keyword.
ODD_VALUES: list[Any] = [
    -1,
    0,
    2.5,
    1.0,
    True,
    None,
    "",
    "strin",
    "string",
    [],
    ["string", "string"],
    ["a", 1],
    {},
    {"type": 3},
    {"$ref": "#/nowhere"},
    {"pattern": "("},
    [{"type": "string"}],
]


def meta_accepts(schema: Any) -> bool:
    try:
        META(schema)
    except fastjsonschema.JsonSchemaValueException:
        return False
    return True


def bench_schemas() -> list[Any]:
    found = []
    for path in sorted(BENCH.glob("*/tools.jsonl")):
        for line in path.read_text().splitlines():
            parameters = json.loads(line).get("parameters")
            if isinstance(parameters, dict):
                found.append(parameters)
    if not found:
        pytest.skip(f"no benchmark tools in {BENCH}")
    return found


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into ``node`` (dict keys and list indexes)."""
    found = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            found += paths(child, (*prefix, key))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found += paths(child, (*prefix, i))
    return found


def replaced(schema: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    mutant = copy.deepcopy(schema)
    node = mutant
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return mutant


def test_every_benchmark_schema_it_passes_is_valid_and_most_take_it() -> None:
    schemas = bench_schemas()
    plain = [s for s in schemas if plainly_valid(s)]
    assert all(meta_accepts(s) for s in plain)
    assert len(plain) >= 0.95 * len(schemas)  # the fast path is the common one


def test_mutated_schemas_it_passes_are_valid() -> None:
    rng = random.Random(7)
    schemas = bench_schemas()
    refused_by_meta = 0
    for schema in rng.sample(schemas, 300):
        for path in rng.sample(paths(schema), min(6, len(paths(schema)))):
            for value in rng.sample(ODD_VALUES, 5):
                mutant = replaced(schema, path, value)
                accepted = meta_accepts(mutant)
                if plainly_valid(mutant):
                    assert accepted, (mutant, path, value)
                refused_by_meta += not accepted
    assert refused_by_meta > 100  # the mutations did reach invalid schemas


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "strin"},
        {"type": []},
        {"type": ["string", "string"]},
        {"required": "city"},
        {"required": ["a", "a"]},
        {"properties": {"a": {"type": 1}}},
        {"properties": []},
        {"minLength": -1},
        {"minLength": 1.5},
        {"maximum": "10"},
        {"enum": "x"},
        {"items": [{"type": "string"}, 3]},
        {"anyOf": []},
        {"description": 3},
        {"uniqueItems": 1},
        {"pattern": "("},
    ],
    ids=repr,
)
def test_invalid_schemas_leave_the_fast_path(schema: dict[str, Any]) -> None:
    assert not plainly_valid(schema)


def test_the_error_of_an_invalid_schema_is_the_meta_schemas() -> None:
    with pytest.raises(ValueError) as refused:
        Tool.model_validate(
            {
                "name": "t",
                "description": "d",
                "parameters": {"type": "object", "properties": {"a": {"type": "strin"}}},
            }
        )
    assert "parameters is not valid JSON Schema at properties/a/type" in str(refused.value)


def test_the_c_answers_as_the_python_on_every_schema_and_mutation() -> None:
    """``plainly_valid`` in C (definitions/walks.py) gives the Python's answer: on the
    benchmark schemas, their mutations and keys that are not text."""
    from toolcat.definitions import walks

    if walks.compiled() is None:
        pytest.skip("_walks not compiled")

    def both(schema: Any) -> tuple[bool, bool]:
        walks.NATIVE = False
        try:
            python = plainly_valid(schema)
        finally:
            walks.NATIVE = True
        return plainly_valid(schema), python

    rng = random.Random(8)
    schemas = bench_schemas()
    odd: list[Any] = [*ODD_VALUES, 2**70, -(2**70), 10**30, {1: "x"}, ["null"] * 2, ["null"]]
    checked = 0
    for schema in rng.sample(schemas, min(400, len(schemas))):
        native, python = both(schema)
        assert native == python, schema
        for path in rng.sample(paths(schema), min(6, len(paths(schema)))):
            for value in rng.sample(odd, 6):
                mutant = replaced(schema, path, value)
                native, python = both(mutant)
                assert native == python, (mutant, path, value)
                checked += 1
    assert checked > 1000
    for schema in (
        {1: "a key that is not text"},
        {"minLength": 2**70},
        {"minLength": -(2**70)},
        {"type": ["string", "nul"]},
        {"properties": {"a": True, "b": {"type": "integer"}}},
        {"definitions": {"a": {"allOf": [{"type": "string"}, False]}}},
    ):
        assert both(schema)[0] == both(schema)[1], schema
