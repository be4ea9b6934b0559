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
