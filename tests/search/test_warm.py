"""``Catalog.warm(mode)`` reads the vector matrix before the BM25 index is made (a big
catalog's BM25 build holds the GIL, and the matrix read beside it took three times as
long), only for a mode that uses vectors, and a matrix that cannot be read never stops it;
a server's readers are warmed for the server's mode."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from tests.search.test_vector_forward import MODEL, vector_catalog
from toolcat import Catalog
from toolcat.errors import InvalidQueryError
from toolcat.search import engine
from toolcat.server.mcp import Readers
from toolcat.store import reader


def test_warm_reads_the_matrix_before_the_bm25_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[object] = []
    made = engine.SearchEngine._make_index

    def make_index(self: engine.SearchEngine, conn: sqlite3.Connection, revision: int) -> None:
        seen.append(self.vectors.key)
        made(self, conn, revision)

    monkeypatch.setattr(engine.SearchEngine, "_make_index", make_index)
    with vector_catalog(tmp_path / "c.db", 3, 10) as catalog:
        revision = reader.revision(catalog._conn)
    with Catalog(tmp_path / "c.db") as serving:
        serving.warm()
        assert seen == [(revision, MODEL)]
        assert serving._search.postings.at(revision, engine.bm25.DEFAULT_WEIGHTS) is not None
        assert serving._search.vectors.tool_rows == 30


def test_warm_for_bm25_leaves_the_matrix_unread(tmp_path: Path) -> None:
    with vector_catalog(tmp_path / "c.db", 3, 10) as catalog:
        revision = reader.revision(catalog._conn)
    with Catalog(tmp_path / "c.db") as serving:
        serving.warm("bm25")
        assert serving._search.vectors.key is None
        assert serving._search.postings.at(revision, engine.bm25.DEFAULT_WEIGHTS) is not None
        with pytest.raises(InvalidQueryError, match="unknown search mode"):
            serving.warm("everything")


def test_a_damaged_matrix_does_not_stop_warm(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with vector_catalog(tmp_path / "c.db", 3, 10) as catalog:
        conn = catalog._conn
        conn.execute("UPDATE embeddings SET vector = 'text' WHERE rowid = 1")
        conn.commit()
        revision = reader.revision(conn)
    with Catalog(tmp_path / "c.db") as serving, caplog.at_level(logging.WARNING):
        serving.warm()
        assert "differ in length" in caplog.text
        assert serving._search.postings.at(revision, engine.bm25.DEFAULT_WEIGHTS) is not None
        assert serving.search("tool", mode="bm25").hits


def test_readers_warm_for_the_server_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the test model has no encoder to export (the matrix is all this reads of it)
    monkeypatch.setattr(Catalog, "export_query_encoder", lambda self: False)
    with vector_catalog(tmp_path / "c.db", 3, 10) as catalog:
        revision = reader.revision(catalog._conn)
    with Catalog(tmp_path / "c.db") as serving:
        readers = Readers(serving, 2, search_mode="bm25")
        try:
            readers.renew(revision)
            assert serving._search.vectors.key is None
        finally:
            readers.close()
    with Catalog(tmp_path / "c.db") as serving:
        readers = Readers(serving, 2)
        try:
            readers.renew(revision)
            assert serving._search.vectors.key == (revision, MODEL)
        finally:
            readers.close()
