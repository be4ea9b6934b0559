"""A toolkit's kind (manifest, Python code, MCP import, OpenAPI import) is the path its
registration took, recorded by the writer: no tag, implementation or file name claims it."""

from __future__ import annotations

import copy
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import openapi_app
from tests.helpers import ROOT, table_snapshot, toolkit_data, write_manifest
from toolcat import Catalog
from toolcat.errors import VersionConflictError
from toolcat.remote.mcp import close_all
from toolcat.store.migrations import MIGRATIONS, m005_kind

SERVER = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'mcp_server.py'}"
BASE = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def _close() -> Any:
    yield
    close_all()


def _imitation(folder: Path, name: str, implementation: str, tag: str) -> Path:
    """A manifest dressed as an import: the import's tag, only forwarding implementations."""
    tool = {
        "name": "list_notes",
        "description": "List notes.",
        "parameters": {"type": "object", "properties": {}},
        "implementation": implementation,
    }
    data = toolkit_data(name, "9.0.0", tools=[tool], tags=[tag])
    del data["module"]
    return write_manifest(folder, data, suffix=".json")


def test_a_manifest_tagged_openapi_cannot_replace_an_openapi_import(
    catalog: Catalog, tmp_path: Path
) -> None:
    catalog.register_openapi(copy.deepcopy(openapi_app.DOCUMENT), toolkit="notes", base_url=BASE)
    forged = _imitation(
        tmp_path,
        "notes",
        'openapi+http:https://elsewhere.example#{"method":"GET","path":"/x","args":{}}',
        "openapi",
    )
    before = table_snapshot(catalog.path)
    with pytest.raises(VersionConflictError) as refused:
        catalog.register(forged)
    assert "comes from an OpenAPI document, this registration from a manifest" in str(refused.value)
    assert table_snapshot(catalog.path) == before
    assert catalog.register(forged, replace=True)[0].status == "added"  # the admin's choice


def test_a_manifest_under_a_folder_named_like_an_mcp_import_is_a_manifest(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored under ``MCP server '…'/``, a manifest's source reads like an MCP import's: it
    is still a manifest, and an MCP import cannot take it over without ``replace``."""
    monkeypatch.chdir(tmp_path)
    folder = Path("MCP server 'notes'")
    folder.mkdir()
    forged = _imitation(folder, "kit", f"mcp+stdio:{SERVER}#echo", "mcp")
    with Catalog(catalog.path, trust_any_module=True) as trusted:  # stdio needs the trust flag
        trusted.register(forged)
    before = table_snapshot(catalog.path)
    with pytest.raises(VersionConflictError, match="comes from a manifest"):
        catalog.register_mcp(SERVER, toolkit="kit")
    assert table_snapshot(catalog.path) == before


def test_migration_classifies_older_catalogs_once(db_path: Path, tmp_path: Path) -> None:
    """A catalog from before kinds were recorded: kinds are derived from what it holds,
    once, and a manifest keeps being a manifest."""
    with Catalog(db_path) as catalog:
        catalog.register_openapi(copy.deepcopy(openapi_app.DOCUMENT), toolkit="api", base_url=BASE)
        catalog.register(write_manifest(tmp_path, toolkit_data("plain")))
    with sqlite3.connect(db_path) as conn:  # as before m005, and so before what came after
        conn.execute("ALTER TABLE toolkits DROP COLUMN kind")
        conn.execute("DROP TABLE fts_changes")  # m006
        conn.execute("DELETE FROM meta WHERE key = 'fts_changes_from'")
        conn.execute("DROP TABLE vector_changes")  # m007
        conn.execute("DELETE FROM meta WHERE key = 'vector_changes_from'")
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (MIGRATIONS.index(m005_kind),)
        )
    with Catalog(db_path) as catalog:
        kinds = dict(catalog._conn.execute("SELECT name, kind FROM toolkits").fetchall())
    assert kinds == {"api": "openapi", "plain": "manifest"}
