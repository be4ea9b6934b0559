"""The text a reindex embeds from a stored definition is the one ``embedding_text`` makes
of the ``Tool`` that definition holds, field for field (absent fields as Tool's defaults)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.helpers import ROOT, SAMPLE_TOOLKITS
from toolcat import Catalog, Tool, Toolkit
from toolcat.search.embeddings import embedding_text, stored_embedding_text
from toolcat.store import reader

BENCH = ROOT.parent / "shared" / "bench"


def bench_tools(limit: int = 400) -> list[Tool]:
    """Real tools of every public source there is here (none where the folder is absent)."""
    tools: list[Tool] = []
    for source in sorted(BENCH.glob("*/tools.jsonl")) if BENCH.is_dir() else []:
        for line in source.read_text().splitlines()[: limit // 7]:
            data = json.loads(line)
            tools.append(
                Tool(
                    name=re.sub(r"[^A-Za-z0-9_-]", "_", data["name"])[:64] or "tool",
                    description=data.get("description") or "no description",
                    parameters=data.get("parameters") or {"type": "object", "properties": {}},
                )
            )
    return tools


def edge_tools() -> list[Tool]:
    nested = {
        "type": "object",
        "properties": {
            "filter": {
                "type": "object",
                "description": "what to keep",
                "properties": {"kind": {"type": "string", "enum": ["a", "b", 3]}},
            },
            "ids": {"type": "array", "items": {"type": "object", "properties": {"id": {}}}},
        },
    }
    return [
        Tool(name="bare", description="A tool with nothing optional."),
        Tool(name="hinted_tool", description="d", search_hint="find things", examples=[]),
        Tool(name="examplesOnly", description="d", examples=["one", "two; three"]),
        Tool(name="nested_params", description="d", parameters=nested),
        Tool(name="empty_hint", description="d", search_hint="", examples=["x"]),
        Tool(name="long", description="word " * 900, search_hint="h " * 300),
    ]


def test_stored_definitions_read_as_their_tools(tmp_path: Path) -> None:
    db = tmp_path / "texts.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.register(Toolkit(name="edges", version="1", tools=edge_tools()))
        bench = bench_tools()
        if bench:
            unique = {t.name: t for t in bench}
            catalog.register(Toolkit(name="bench", version="1", tools=[*unique.values()]))
    with Catalog(db) as catalog:
        rows = catalog._conn.execute("SELECT content_hash, definition FROM tools").fetchall()
    assert len(rows) > 40
    for content_hash, text in rows:
        definition = reader.decode_definition(text, f"hash {content_hash}")
        assert stored_embedding_text(definition) == embedding_text(
            Tool.model_construct(**definition)
        )


def test_a_stored_definition_without_a_usable_name_is_damaged_for_a_reindex(
    tmp_path: Path,
) -> None:
    """Hostile: the catalog file is input. A definition with no ``name``, or one that is not
    text, passes ``decode_definition`` (readers take the name from its row); a reindex,
    which reads the name from the definition, says the catalog is damaged and which
    definition, instead of a KeyError/AttributeError traceback."""
    import pytest

    from toolcat.errors import CatalogDamagedError
    from toolcat.search import reindex

    with Catalog(tmp_path / "c.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        conn = catalog._conn
        (first,) = conn.execute("SELECT content_hash FROM tools ORDER BY id LIMIT 1").fetchone()
        for name in ("absent", None, 7, ["a"]):
            edit = (
                "json_remove(definition, '$.name')"
                if name == "absent"
                else f"json_set(definition, '$.name', json('{json.dumps(name)}'))"
            )
            conn.execute(f"UPDATE tools SET definition = {edit} WHERE content_hash = ?", (first,))
            stale = reader.stale_vectors(conn, "any-model", everything=True)
            with pytest.raises(CatalogDamagedError, match=first):
                reindex._texts(stale)
