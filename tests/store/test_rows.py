"""Rows made for a registration index what ``index_fields`` makes of the tools."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import yaml

from toolcat import Catalog
from toolcat.registry.manifest import load_manifest
from toolcat.store import writer
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
