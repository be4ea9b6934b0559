"""A registration's log is copied into the catalog file beside the index's save
(``writer.checkpoint_beside``), not by the commit before it; the file ends whole."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog
from toolcat.registry.manifest import load_manifest
from toolcat.store import writer
from toolcat.store.rows import rows_of

from ..helpers import toolkit_data, write_manifest


def _toolkits(folder: Path, n: int) -> list[Path]:
    folder.mkdir()
    tools = [
        {
            "name": f"t{i}",
            "description": f"tool {i} " + "word " * 300,
            "parameters": {"type": "object"},
        }
        for i in range(50)
    ]
    return [write_manifest(folder, toolkit_data(f"kit{k}", tools=tools), ".json") for k in range(n)]


def _pages_in_file(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        (size,) = conn.execute("PRAGMA page_size").fetchone()
        (count,) = conn.execute("PRAGMA page_count").fetchone()  # as the log has it
    finally:
        conn.close()
    return count - os.path.getsize(path) // size  # pages only the log holds


def test_a_stream_without_checkpoint_leaves_the_log_to_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    manifests = _toolkits(tmp_path / "m", 60)
    with Catalog(path, create=True) as catalog:
        conn = catalog._conn
        entries = [(tk, None, rows_of(tk)) for tk in map(load_manifest, manifests)]
        writer.register_stream(conn, entries, replace=False, checkpoint=False)
        assert _pages_in_file(path) > 1000  # the commit copied none of them (past autocheckpoint)
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000  # given back
        with writer.checkpoint_beside(str(path)):
            pass
        assert _pages_in_file(path) <= 0


def test_register_copies_the_log_while_the_index_is_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.db"
    seen: dict[str, Any] = {}
    save = Catalog._save_index

    def watched(self: Catalog) -> None:
        seen["threads"] = {t.name for t in threading.enumerate()}
        save(self)

    monkeypatch.setattr(Catalog, "_save_index", watched)
    with Catalog(path, create=True) as catalog:
        catalog.register(_toolkits(tmp_path / "m", 60))
        assert _pages_in_file(path) <= 0  # whole once register returns
        assert catalog.search("tool 7 word", k=1).hits
    assert "toolcat-checkpoint" in seen["threads"]


def test_the_checkpoint_never_makes_a_file_that_is_gone(tmp_path: Path) -> None:
    gone = tmp_path / "gone.db"
    with writer.checkpoint_beside(str(gone)):
        pass
    assert not gone.exists()
    with writer.checkpoint_beside(":memory:"):
        pass
    assert not (Path.cwd() / ":memory:").exists()


def test_an_error_in_the_block_still_waits_for_the_copy(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with Catalog(path, create=True) as catalog:
        entries = [
            (tk, None, rows_of(tk)) for tk in map(load_manifest, _toolkits(tmp_path / "m", 5))
        ]
        writer.register_stream(catalog._conn, entries, replace=False, checkpoint=False)
        with pytest.raises(ZeroDivisionError), writer.checkpoint_beside(str(path)):
            raise ZeroDivisionError
        assert not [t for t in threading.enumerate() if t.name == "toolcat-checkpoint"]
        assert _pages_in_file(path) <= 0
