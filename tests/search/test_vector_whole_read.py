"""The vector matrix read whole by two scans in file order (``embeddings._whole_rows``)
holds exactly the rows of the SQL join (``ACTIVE_VECTORS``), and ``Catalog.warm`` reads it
before the BM25 index is made, only for a mode that uses vectors."""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from tests.search.test_vector_forward import MODEL, kit, store_random, vector_catalog
from toolcat import Catalog
from toolcat.errors import InvalidQueryError
from toolcat.search import embeddings, engine
from toolcat.server.mcp import Readers
from toolcat.store import reader, writer

SCAN = embeddings.MODEL_VECTORS.split("?")[0]  # as traced, the model bound


def joined(conn: sqlite3.Connection, model: str = MODEL) -> Counter[tuple[int, bytes]]:
    return Counter(conn.execute(embeddings.ACTIVE_VECTORS, (model,)).fetchall())


def scanned(
    conn: sqlite3.Connection, model: str = MODEL
) -> tuple[Counter[tuple[int, bytes]], list[str]]:
    """The rows ``_whole_rows`` gives, and the statements it ran."""
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        active = conn.execute(
            "SELECT count(*) FROM tools t JOIN toolkits k ON k.id = t.toolkit_id WHERE k.active = 1"
        ).fetchone()[0]
        rows: Counter[tuple[int, bytes]] = Counter()
        for chunk in embeddings._whole_rows(conn, model, active):
            assert 0 < len(chunk) <= embeddings.VECTOR_CHUNK
            rows.update(chunk)
    finally:
        conn.set_trace_callback(None)
    return rows, statements


def test_the_scans_read_what_the_join_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embeddings, "VECTOR_CHUNK", 7)  # rows of shared hashes span chunks
    with vector_catalog(tmp_path / "c.db", 6, 20) as catalog:
        conn = catalog._conn
        # The same definitions in three toolkits (one hash, one vector, three tools), an
        # old version whose vectors stay, a deprecated one, tools without a vector.
        same = [kit("copy", 15).model_copy(update={"name": f"copy{n}"}) for n in range(3)]
        writer.register(conn, [(k, None) for k in same], replace=False)
        store_random(conn, 1)
        writer.register(conn, [(kit("kit2", 20, version="2.0", words="new"), None)], replace=False)
        store_random(conn, 2)
        writer.deprecate(conn, "kit4", "1.0")
        writer.register(conn, [(kit("bare", 9), None)], replace=False)
        expected = joined(conn)
        shared = Counter(h for (h,) in conn.execute("SELECT content_hash FROM tools"))
        assert max(shared.values()) >= 3 and len(expected) > 100
        rows, statements = scanned(conn)
        assert rows == expected
        assert any(SCAN in s for s in statements)


def test_a_table_of_many_more_vectors_is_joined_in_sql(tmp_path: Path) -> None:
    with vector_catalog(tmp_path / "c.db", 4, 10) as catalog:
        conn = catalog._conn
        expected = joined(conn)
        # Another model's vectors for every definition, twice over the active tools.
        hashes = [h for (h,) in conn.execute("SELECT content_hash FROM tools")]
        for model in ("other-a", "other-b"):
            writer.store_vectors(conn, model, [(h, bytes(4 * 384)) for h in hashes])
        rows, statements = scanned(conn)
        assert rows == expected
        assert not any(SCAN in s for s in statements)
        assert scanned(conn, "other-a")[0] == joined(conn, "other-a")


def test_hashes_of_other_types_match_as_sql_matches_them(tmp_path: Path) -> None:
    """A file written by hand: a BLOB or a number where a hash was stored. SQL's ``=``
    joins TEXT to TEXT only; the scans' dict must not join more (or fewer)."""
    with vector_catalog(tmp_path / "c.db", 2, 5) as catalog:
        conn = catalog._conn
        first, second = conn.execute("SELECT id, content_hash FROM tools LIMIT 2").fetchall()
        vector = conn.execute(
            "SELECT vector FROM embeddings WHERE content_hash = ?", (first[1],)
        ).fetchone()[0]
        # a BLOB of the same bytes as a tool's hash, and the tools' hash made a BLOB
        conn.execute(
            "UPDATE embeddings SET content_hash = CAST(content_hash AS BLOB) "
            "WHERE content_hash = ?",
            (second[1],),
        )
        conn.execute(
            "UPDATE tools SET content_hash = CAST(? AS BLOB) WHERE id = ?", ("x", first[0])
        )
        conn.execute(
            "INSERT INTO embeddings (content_hash, model, vector) VALUES (CAST(? AS BLOB), ?, ?)",
            ("x", MODEL, vector),
        )
        conn.execute(
            "INSERT INTO embeddings (content_hash, model, vector) VALUES (7, ?, ?)", (MODEL, vector)
        )
        conn.execute("UPDATE tools SET content_hash = 7 WHERE id = (SELECT max(id) FROM tools)")
        conn.commit()
        expected = joined(conn)
        ids = {tool_id for tool_id, _ in expected}
        assert first[0] in ids and second[0] not in ids  # BLOB joins BLOB, never TEXT
        assert scanned(conn)[0] == expected


def test_an_empty_table_reads_nothing(tmp_path: Path) -> None:
    with Catalog(tmp_path / "c.db") as catalog:
        catalog.register([kit("a", 3)])
        assert scanned(catalog._conn)[0] == Counter()


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
