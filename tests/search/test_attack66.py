"""attack66: outside attacks on the vector matrix read whole (by two scans joined in Python
when attacked: back to the SQL join since, these tests kept so that the matrix holds the
join's rows for any file), ``Catalog.warm(mode)`` reading the matrix before the BM25 index,
and the BM25 save distrusted at the revision a replica's copy was restored again at
(``LexicalIndex._distrusted``, ``lexical_file.forget_saved``)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.search.test_attack65 import settle as _settle
from tests.search.test_vector_forward import (
    MODEL,
    contents,
    registered,
    store_random,
    vector_catalog,
    whole,
)
from tests.search.test_vector_forward import (
    kit as vkit,
)
from toolcat import Catalog, Tool, Toolkit
from toolcat.errors import EmbeddingError
from toolcat.search import bm25, embeddings, engine
from toolcat.search.lexical_index import TantivyIndex
from toolcat.store import reader, writer

# -- helpers ---------------------------------------------------------------------------------


def by_hand(conn: sqlite3.Connection, *statements: str, params: tuple[Any, ...] = ()) -> None:
    """Edit the catalog as a hostile file would be, and move its revision."""
    with writer.write_transaction(conn):
        for sql in statements:
            conn.execute(sql, params if "?" in sql else ())
        writer.bump_revision(conn)


def sql_join(conn: sqlite3.Connection) -> list[tuple[int, Any]]:
    """The rows the SQL join (``ACTIVE_VECTORS``) gives, sorted."""
    return sorted(conn.execute(embeddings.ACTIVE_VECTORS, (MODEL,)).fetchall())


def whole_rows(conn: sqlite3.Connection) -> list[tuple[int, Any]]:
    """(tool id, vector bytes) of a matrix read whole, sorted."""
    return sorted(contents(whole(conn))[0].items())


@pytest.fixture
def vconn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    with vector_catalog(tmp_path / "catalog.db", 3, 4) as catalog:
        yield catalog._conn


# -- surface 1: the matrix read whole by two scans ------------------------------------------


def test_a_hash_that_is_not_utf8_reads_the_rows_the_sql_join_reads(
    vconn: sqlite3.Connection,
) -> None:
    """A hostile file (a replica's comes from the object store) whose tool's content hash is
    TEXT that is not UTF-8: the SQL join never decodes it (it compares bytes) and read the
    matrix as ever; the whole read decodes every active tool's hash in Python and raises
    ``sqlite3.OperationalError`` (Could not decode to UTF-8): every search in a vector mode
    fails, and ``Catalog.warm`` (``toolcat serve``'s startup) raises it."""
    conn = vconn
    digest = conn.execute("SELECT content_hash FROM tools WHERE id = 1").fetchone()[0]
    by_hand(
        conn,
        "UPDATE embeddings SET content_hash = CAST(x'ffff' AS TEXT) WHERE content_hash = ?",
        "UPDATE tools SET content_hash = CAST(x'ffff' AS TEXT) WHERE id = 1",
        params=(digest,),
    )
    expected = sql_join(conn)
    assert len(expected) == 12
    index = whole(conn)  # raised sqlite3.OperationalError
    assert index.tool_rows == 12 and index.missing == 0
    assert whole_rows(conn) == expected


def test_a_vector_of_the_wrong_type_first_in_file_order_is_still_an_embedding_error(
    vconn: sqlite3.Connection,
) -> None:
    """A vector stored as a number (a hostile or hand-edited file) raised ``EmbeddingError``
    (damaged: run reindex --full) when its tool came after a good one in the SQL join.
    Read whole in file order, the number is the first row: ``len(42)`` raises TypeError
    out of ``VectorIndex.refresh``, which ``SearchEngine.warm`` does not catch, so
    ``toolcat serve`` (``catalog.warm(mode)``) dies at startup instead of logging it."""
    conn = vconn
    first_tool = conn.execute(embeddings.ACTIVE_VECTORS, (MODEL,)).fetchone()[0]
    # the vector of a tool that the SQL join reaches last, moved first in file order
    last = conn.execute(
        "SELECT t.content_hash FROM tools t WHERE t.id != ? ORDER BY t.id DESC LIMIT 1",
        (first_tool,),
    ).fetchone()[0]
    by_hand(
        conn,
        "UPDATE embeddings SET vector = 42, rowid = -1 WHERE content_hash = ?",
        params=(last,),
    )
    with pytest.raises(EmbeddingError):
        whole(conn)


def test_warm_logs_a_vector_of_the_wrong_type_and_serves_on(tmp_path: Path) -> None:
    """``Catalog.warm()`` (``toolcat serve``'s startup, ``Readers.renew``) logs a matrix that
    cannot be read ("left to the searches"): before this change serve started on such a
    file. A number as the vector first in file order now raises TypeError out of warm."""
    path = tmp_path / "catalog.db"
    with vector_catalog(path, 2, 3) as catalog:
        conn = catalog._conn
        by_hand(
            conn,
            "UPDATE embeddings SET vector = 42 WHERE rowid = (SELECT min(rowid) FROM embeddings)",
        )
    with Catalog(path, embedding_model=MODEL) as catalog:
        catalog.warm("embedding")  # must not raise
        assert catalog.list(limit=1)


def _hostile_schema(path: Path, tables: tuple[str, ...], old: str, new: str, *edits: str) -> None:
    """Rewrite ``tables``' content_hash column as a hostile file declares it, then edit."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA writable_schema = ON")
    for table in tables:
        sql = db.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        db.execute(
            "UPDATE sqlite_master SET sql = ? WHERE name = ?", (sql.replace(old, new), table)
        )
    db.commit()
    db.close()
    db = sqlite3.connect(path)
    digest = db.execute("SELECT content_hash FROM tools WHERE id = 1").fetchone()[0]
    for sql in edits:
        db.execute(sql, (digest,) if "?" in sql else ())
    db.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    "tables,old,new,edits",
    [
        (  # a column that lets NULL in: NULL = NULL is no match in SQL, a dict key in Python
            ("tools", "embeddings"),
            "content_hash TEXT NOT NULL",
            "content_hash TEXT",
            (
                "UPDATE embeddings SET content_hash = NULL WHERE content_hash = ?",
                "UPDATE tools SET content_hash = NULL WHERE id = 1",
            ),
        ),
        (  # a number in an INTEGER column against the tool's text: SQL's affinity matches them
            ("embeddings",),
            "content_hash TEXT NOT NULL",
            "content_hash INTEGER NOT NULL",
            (
                "UPDATE embeddings SET content_hash = 7 WHERE content_hash = ?",
                "UPDATE tools SET content_hash = '7' WHERE id = 1",
            ),
        ),
    ],
    ids=["null-hashes", "affinity"],
)
def test_a_hostile_schema_reads_the_rows_the_sql_join_reads(
    tmp_path: Path, tables: tuple[str, ...], old: str, new: str, edits: tuple[str, ...]
) -> None:
    """The matrix must hold exactly the rows the SQL join gives, for any catalog file. A file
    whose schema another program wrote: a tool and a vector whose hashes are both NULL
    get a vector (the join gives that tool none: it is reported missing); a hash stored
    as the number 7 in an INTEGER column against a tool's text '7' is joined by SQL's
    comparison affinity and missed by Python's dict (a vector dropped)."""
    path = tmp_path / "catalog.db"
    with vector_catalog(path, 2, 3):
        pass
    _hostile_schema(path, tables, old, new, *edits)
    with Catalog(path) as catalog:
        conn = catalog._conn
        with catalog._snapshot():
            expected = sql_join(conn)
            index = whole(conn)
            assert sorted(contents(index)[0]) == [tool_id for tool_id, _ in expected]
            assert whole_rows(conn) == expected


# -- surface 2: Catalog.warm(mode) ----------------------------------------------------------


def _damaged_vectors(path: Path) -> None:
    """Overwrite the embeddings table's root page with noise (a bad disk, a torn copy)."""
    with vector_catalog(path, 3, 4) as catalog:
        catalog._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db = sqlite3.connect(path)
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'embeddings'").fetchone()[0]
    size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xff" * size)


@pytest.mark.parametrize("mode", [None, "hybrid"])
def test_warm_leaves_a_damaged_matrix_to_the_searches(tmp_path: Path, mode: str | None) -> None:
    """A catalog whose embeddings pages are damaged: BM25 search and list answer on it, and
    ``toolcat serve`` started on it (warm read the BM25 index only). ``warm`` now reads the
    matrix first and catches only ``EmbeddingError``: the ``CatalogDamagedError`` of the
    matrix read (and, for the default mode, of ``best_mode``'s look at the vectors) escapes
    ``Catalog.warm(mode)``, and ``toolcat serve`` dies at startup on a file whose BM25
    search, list and calls work ("a matrix that cannot be read is left to the searches")."""
    path = tmp_path / "catalog.db"
    _damaged_vectors(path)
    with Catalog(path) as catalog:
        assert len(catalog.search("tool", mode="bm25").hits) == 10  # the file serves BM25
        catalog.warm(mode)  # must not raise
        assert len(catalog.search("tool", mode="bm25").hits) == 10


def test_a_bm25_warm_reads_no_vectors(tmp_path: Path) -> None:
    """held: a bm25 server's warm reads no matrix; an unknown mode is refused."""
    from toolcat.errors import InvalidQueryError

    path = tmp_path / "catalog.db"
    with vector_catalog(path, 2, 3):
        pass
    with Catalog(path) as catalog:
        catalog.warm("bm25")
        catalog.warm("regex")
        assert catalog._search.vectors.key is None and catalog._search.vectors.matrix is None
        with pytest.raises(InvalidQueryError):
            catalog.warm("embeddings")
        catalog.warm("embedding")
        assert catalog._search.vectors.key == (catalog.revision, MODEL)


# -- surface 3: the BM25 save distrusted at the revision a copy was restored again at ------

QUERIES = ["read a file", "count the legs of insects", "petal flowers", "convert a time zone"]


def _weights() -> tuple[float, ...]:
    return tuple(bm25.DEFAULT_WEIGHTS)


def _unsaved(path: Path, *kits: Toolkit) -> None:
    """A write that saves no index (another process's, as a replica's copy arrives)."""
    with Catalog(path) as admin:
        writer.register(admin._conn, [(k, None) for k in kits], replace=False)


def _hits(catalog: Catalog) -> list[list[tuple[str, float]]]:
    return [
        [(h.tool.id, h.score) for h in catalog.search(q, k=10, mode="bm25").hits] for q in QUERIES
    ]


def _fts5_hits(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, float]]]:
    """A fresh process's answers from FTS5 itself (no in-memory index made)."""
    with monkeypatch.context() as patch:
        patch.setattr(engine, "POSTINGS_AFTER", 10**9)
        with Catalog(path) as fresh:
            return _hits(fresh)


def _checkpoint(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


@pytest.fixture
def restored_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Catalog, int]]:
    """A replica's damaged copy D at revision R served (its BM25 index built from D's rows
    and saved beside the file at R), then the good copy G of the same revision (same
    history, same totals: a damaged row's words replaced by as many others) renamed over
    it and ``forget_kept(R)`` called, as ``Readers.renew`` does. Yields (path, the serving
    catalog, R)."""
    pytest.importorskip("tantivy")
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 0)
    path, good = tmp_path / "catalog.db", tmp_path / "good.db"
    with Catalog(path) as admin:
        admin.register(SAMPLE_TOOLKITS)
    fauna = Toolkit(
        name="fauna",
        version="1",
        tools=[Tool(name="fauna_lookup", description="Count the legs of insects and spiders")],
    )
    _unsaved(path, fauna)
    _checkpoint(path)
    shutil.copy(path, good)
    db = sqlite3.connect(path)  # D: one row's words damaged, nothing else moved
    db.execute(
        "UPDATE tools_fts SET description = 'count petal flower spider' "
        "WHERE rowid = (SELECT id FROM tools WHERE toolkit = 'fauna')"
    )
    db.commit()
    db.close()
    _checkpoint(path)
    with Catalog(path) as d, Catalog(good) as g:
        assert d.revision == g.revision
        with d._snapshot() as dc, g._snapshot() as gc:
            assert lexical_index_stamp(dc, d.revision) == lexical_index_stamp(gc, g.revision)
    serving = Catalog(path)
    try:
        serving.warm()
        _settle(serving._search.postings)
        assert isinstance(serving._search.postings.at(serving.revision, _weights()), TantivyIndex)
        revision = serving.revision
        serving._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        os.replace(good, path)  # G renamed over D at the same revision
        serving.forget_kept(revision)
        yield path, serving, revision
    finally:
        serving.close()


def lexical_index_stamp(conn: sqlite3.Connection, revision: int) -> dict[str, Any]:
    from toolcat.search import lexical_file

    return lexical_file.stamp(conn, revision, _weights())


def test_another_process_at_the_revision_restored_again_does_not_take_up_the_damaged_save(
    restored_again: tuple[Path, Catalog, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The distrust lives in the serving process's memory only: the damaged copy's save
    stays beside the file stamped for R, with the history and totals of the good copy.
    Another process on the replica's file at R (a ``toolcat search``, the server
    restarted before its background build replaced the save) loads it and answers from
    D's rows: the fauna tool found for "petal flowers", missed for "legs of insects"."""
    path, _, revision = restored_again
    with Catalog(path) as other:
        assert other.revision == revision
        other.warm("bm25")
        _settle(other._search.postings)
        assert _hits(other) == _fts5_hits(path, monkeypatch)


@pytest.mark.parametrize("rows_changed", [True, False], ids=["rows", "vectors-only"])
def test_the_next_revision_does_not_bring_the_damaged_save_forward(
    restored_again: tuple[Path, Catalog, int],
    monkeypatch: pytest.MonkeyPatch,
    rows_changed: bool,
) -> None:
    """The copy restored again at R, and R+1 arrives before anything was built at R (the
    next copy came before the readers warmed, or the renew's warm started a build that
    opened the file once R+1 was renamed over it). At R+1 nothing is distrusted:
    ``bring_forward`` takes up the save stamped at R (the damaged copy's: same history,
    totals that add up) and brings it forward by the log, or, when R+1 changed no row,
    restamps it for R+1 with no look at its content: D's rows are served at R+1, and
    saved for every later process and revision."""
    path, serving, revision = restored_again
    if rows_changed:
        _unsaved(
            path,
            Toolkit(
                name="extra",
                version="1",
                tools=[Tool(name="x", description="Translate text between languages")],
            ),
        )
    else:
        with Catalog(path) as admin, writer.write_transaction(admin._conn):
            writer.bump_revision(admin._conn)  # vectors alone, say
    with Catalog(path) as new:
        assert new.revision == revision + 1
        new.share_indexes(serving)
        new.warm("bm25")
        _settle(serving._search.postings)
        assert _hits(new) == _fts5_hits(path, monkeypatch)


def test_the_revision_restored_again_is_served_from_the_new_copy(
    restored_again: tuple[Path, Catalog, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """held: at R itself the new readers build from G (the save's digest is D's), save it,
    and a second warm serves tantivy without building again."""
    path, serving, revision = restored_again
    with Catalog(path) as new:
        new.share_indexes(serving)
        new.warm("bm25")
        _settle(serving._search.postings)
        assert _hits(new) == _fts5_hits(path, monkeypatch)
        assert isinstance(serving._search.postings.at(revision, _weights()), TantivyIndex)
    with Catalog(path) as again:
        again.warm("bm25")
        _settle(again._search.postings)
        assert isinstance(again._search.postings.at(revision, _weights()), TantivyIndex)
        assert _hits(again) == _fts5_hits(path, monkeypatch)


def test_shared_hashes_other_models_old_versions_and_negative_rowids_read_as_the_join(
    vconn: sqlite3.Connection,
) -> None:
    """held: a matrix brought forward after logged writes (a new version, its vectors, a
    deprecation) holds what a whole read holds; then tools sharing one definition's
    vector, another model's vectors under the same hashes, a deprecated version's
    vectors, a blob hash equal in bytes to a text one, negative rowids: both paths give
    the join's rows."""
    conn = vconn
    index = whole(conn)
    registered(conn, vkit("kit1", 4, version="2.0", words="new"))
    store_random(conn, 3)
    index.refresh(conn, reader.revision(conn), MODEL)
    assert contents(index) == contents(whole(conn))
    writer.deprecate(conn, "kit1", "2.0")
    index.refresh(conn, reader.revision(conn), MODEL)
    assert contents(index) == contents(whole(conn))
    digest = conn.execute("SELECT content_hash FROM tools WHERE id = 1").fetchone()[0]
    by_hand(conn, "UPDATE tools SET content_hash = ? WHERE id IN (2, 3)", params=(digest,))
    by_hand(
        conn,
        "INSERT INTO embeddings (content_hash, model, vector) "
        "SELECT content_hash, 'other-model', x'00' FROM embeddings",
        "UPDATE embeddings SET rowid = -rowid WHERE rowid % 3 = 0",
    )
    by_hand(
        conn,
        "INSERT INTO tools (toolkit_id, toolkit, name, defer_loading, tags, definition, "
        "content_hash) SELECT toolkit_id, toolkit, 'blobby', 0, tags, definition, "
        "CAST(content_hash AS BLOB) FROM tools WHERE id = ?",
        params=(5,),
    )
    expected = sql_join(conn)
    assert len(expected) == 12
    assert whole_rows(conn) == expected
    assert sorted(contents(whole(conn))[0]) == [i for i, _ in expected]
