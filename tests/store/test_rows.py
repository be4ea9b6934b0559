"""Rows made for a registration index what ``index_fields`` makes of the tools."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from toolcat import Catalog
from toolcat.models import Toolkit, content_hash
from toolcat.registry.manifest import load_manifest
from toolcat.store import writer
from toolcat.store.rows import rows_of
from toolcat.text.documents import index_fields

from ..helpers import SAMPLE_TOOLKITS

QUERY = "zorbify the quarterly ledger"  # words no sample tool has


def test_a_new_version_indexes_its_fields_learned_queries_included(
    sample_catalog: Catalog, tmp_path: Path
) -> None:
    sample_catalog.record_use(QUERY, "data.json_diff")
    sample_catalog.reindex()
    data = yaml.safe_load((SAMPLE_TOOLKITS / "data.yaml").read_text())
    data["version"] = "99.0.0"
    manifest = tmp_path / "data.yaml"
    manifest.write_text(yaml.safe_dump(data))
    sample_catalog.register(manifest)
    toolkit = load_manifest(manifest)
    conn = sqlite3.connect(sample_catalog.path)
    try:
        learned = writer.learned_queries(conn, "data")
        indexed = conn.execute(
            "SELECT t.name, f.name, f.hint, f.description, f.params, f.tags FROM tools_fts f "
            "JOIN tools t ON t.id = f.rowid JOIN toolkits k ON k.id = t.toolkit_id "
            "WHERE k.name = 'data' AND k.version = '99.0.0' ORDER BY t.id"
        ).fetchall()
    finally:
        conn.close()
    assert learned["json_diff"] == [QUERY]
    # what index_fields makes of the models with the recorded queries (the code before
    # made the rows this way)
    assert indexed == [
        (tool.name, *index_fields(tool, toolkit, learned.get(tool.name, ())))
        for tool in toolkit.tools
    ]
    assert any("zorbif" in row[5] for row in indexed)


def every_field_tool(**overrides: object) -> dict[str, object]:
    tool: dict[str, object] = {
        "name": "lookup_record",
        "description": 'Look up a record — by key. «quoted» "text"\nand a newline',
        "parameters": {
            "type": "object",
            "properties": {
                "key": {"type": "string", "default": None, "enum": ["a", "b"]},
                "n": {"type": "number", "minimum": 0.5, "maximum": 1e20},
            },
            "required": ["key"],
        },
        "output_schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
        "tags": ["zeta", "alpha"],
        "defer_loading": False,
        "idempotent": True,
        "streaming": True,
        "annotations": {"title": "T", "read_only": True, "destructive": False, "open_world": None},
        "implementation": "pkg.mod:attr",
        "examples": ["find the record", "ünïcode"],
        "search_hint": "records",
        "timeout": 30,
        "max_concurrency": 2,
        "max_result_bytes": 1000,
    }
    tool.update(overrides)
    return tool


@pytest.mark.parametrize(
    "tools",
    [
        [{"name": "bare", "description": "Only what a tool needs."}],
        [every_field_tool()],
        [every_field_tool(annotations={"title": "only a title"})],
        [every_field_tool(annotations={}), {"name": "second", "description": "Another."}],
        [every_field_tool(timeout=2.5, output_schema=None, defer_loading=None, tags=[])],
    ],
    ids=["bare", "every-field", "some-annotations", "empty-annotations", "nulls"],
)
@pytest.mark.parametrize("head", [{}, {"module": "pkg", "tags": ["k"], "description": "Kit."}])
def test_the_toolkit_digest_is_its_content_hash(
    tools: list[dict[str, object]], head: dict[str, object]
) -> None:
    """``rows_of`` makes the toolkit's digest from its tools' dumps; it is the hash of the
    whole toolkit dumped, as stored before (None fields included, at every level)."""
    toolkit = Toolkit.model_validate(
        {"toolkit": "kit", "version": "1.0", "defer_loading": True, "tools": tools, **head}
    )
    assert rows_of(toolkit).digest == toolkit.content_hash()
    assert toolkit.content_hash() == content_hash(toolkit.model_dump(mode="json"))


def test_tags_json_is_json_dumps_of_the_tags() -> None:
    import json
    import random

    from toolcat.store.rows import tags_json

    rng = random.Random(5)
    alphabet = ["a", "Z", " ", '"', "\\", "\n", "\x00", "\x7f", "é", "北", "\ud800", "😀", "/"]
    for _ in range(3_000):
        tags = [
            "".join(rng.choices(alphabet, k=rng.randrange(0, 8)))
            for _ in range(rng.randrange(0, 6))
        ]
        assert tags_json(tags) == json.dumps(tags)
        assert tags_json(tuple(tags)) == json.dumps(tags)


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"a": {"default": None, "enum": [None, 1.5, True]}}},
        {"type": "object", "x": (1, 2)},  # a tuple: not plain, dumped by pydantic
        {"type": "object", "x": float("nan")},  # dumped by pydantic (as null)
        {"type": "object", "x": 2**64},
        {"type": "object", "x": "\ud800"},
        {"type": "object", "nested": [[[[{"deep": [{"deeper": None}]}]]]]},
    ],
    ids=["plain", "tuple", "nan", "big-int", "surrogate", "nested"],
)
def test_a_definition_is_pydantics_dump_whichever_way_it_is_made(
    parameters: dict[str, object],
) -> None:
    """``tool_definition`` takes plain parameters as they are (checked in C) and has
    pydantic dump anything else: the stored text and hash are those of the whole dump."""
    import json

    from toolcat.definitions import walks
    from toolcat.models import Tool, canonical_json
    from toolcat.store.rows import tool_definition

    tool = Tool.model_validate({"name": "t", "description": "A tool.", "parameters": parameters})
    try:
        expected = tool.model_dump(mode="json", exclude_none=True)
    except ValueError:  # pydantic refuses what it cannot dump; so does the definition
        with pytest.raises(ValueError):
            tool_definition(tool)
        return
    for native in (True, False):
        walks.NATIVE = native
        try:
            dumped = tool_definition(tool)
        finally:
            walks.NATIVE = True
        assert dumped == expected or json.dumps(dumped) == json.dumps(expected)
        assert canonical_json(dumped) == canonical_json(expected)
    if not canonical_json(expected).isascii() and "\ud800" in canonical_json(expected):
        return  # no row holds a lone surrogate: its hash cannot be taken, either way
    toolkit = Toolkit(name="kit", version="1.0", tools=[tool])
    row = rows_of(toolkit).tools[0]
    assert row.definition == canonical_json(expected)
    assert rows_of(toolkit).digest == toolkit.content_hash()


def test_rows_are_the_same_with_the_walks_in_c_or_in_python() -> None:
    from toolcat.definitions import walks

    for path in sorted(SAMPLE_TOOLKITS.glob("*.*")):
        toolkit = load_manifest(path)
        walks.NATIVE = False
        try:
            python = rows_of(toolkit)
        finally:
            walks.NATIVE = True
        assert rows_of(toolkit) == python
        assert python.digest == toolkit.content_hash()
        for tool, row in zip(toolkit.tools, python.tools, strict=True):
            assert row.definition == canonical_json_of(tool)


def canonical_json_of(tool: object) -> str:
    from toolcat.models import canonical_json

    return canonical_json(tool.model_dump(mode="json", exclude_none=True))  # type: ignore[attr-defined]


def test_a_tool_subclass_is_dumped_by_its_own_serializers() -> None:
    from pydantic import field_serializer

    from toolcat.models import Tool
    from toolcat.store.rows import tool_definition

    class Marked(Tool):
        @field_serializer("parameters")
        def _marked(self, value: dict[str, object]) -> dict[str, object]:
            return {**value, "x-marked": True}

    tool = Marked(name="t", description="A tool.", parameters={"type": "object"})
    assert tool_definition(tool) == tool.model_dump(mode="json", exclude_none=True)
    assert tool_definition(tool)["parameters"]["x-marked"] is True


def test_a_row_of_the_wrong_length_is_refused_not_raised() -> None:
    """A ``ToolRow`` made without its ``__new__`` (a forged pickle can) with too few or too
    many fields is a problem ``check_rows`` names, as every other garbled row is."""
    from toolcat.store.rows import ToolRow, check_rows

    toolkit = Toolkit(name="kit", version="1.0", tools=[{"name": "t", "description": "A."}])
    rows = rows_of(toolkit)
    assert check_rows(toolkit, rows) is None
    good = rows.tools[0]
    for fields in (tuple(good)[:6], (*good, "extra"), ()):
        rows.tools[0] = tuple.__new__(ToolRow, fields)
        assert check_rows(toolkit, rows) == "tool 't': a ToolRow, not a row"
