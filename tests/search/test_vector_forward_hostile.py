"""The change logs a vector matrix is brought forward by are read from the catalog file (a
replica's comes from the object store): wrong types, a log from another history, more rows
than allowed, a definition shared by many tools, a table or setting gone are read whole or
refused as damaged, never a crash, never a matrix that differs from a whole read, and the
work done is bounded by the share of the catalog allowed."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.search.test_vector_forward import (
    MODEL,
    WIDTH,
    contents,
    counted_loads,
    forward,
    kit,
    registered,
    store_random,
    vector_catalog,
    whole,
)
from toolcat import Catalog
from toolcat.errors import CatalogDamagedError, EmbeddingError
from toolcat.search import embeddings
from toolcat.store import reader, writer


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return counted_loads(monkeypatch)


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    with vector_catalog(tmp_path / "catalog.db", 5, 20) as opened:
        yield opened


def by_hand(conn: sqlite3.Connection, *statements: tuple[str, tuple[object, ...]]) -> None:
    """Edit the catalog as a hostile file would be, and move its revision."""
    with writer.write_transaction(conn):
        for sql, params in statements:
            conn.execute(sql, params)
        writer.bump_revision(conn)


@pytest.mark.parametrize(
    "row",
    [
        ("'ten'", "?", "'" + "a" * 64 + "'"),  # a revision that is text: above every number
        ("1e300", "?", "x'00'"),  # a hash that is a blob
        ("(SELECT value + 1 FROM meta WHERE key = 'revision')", "?", "42"),  # a number
        ("(SELECT value + 1 FROM meta WHERE key = 'revision')", "?", "'\u202e\n' || char(0)"),
    ],
    ids=["text-revision", "blob-hash", "integer-hash", "control-hash"],
)
def test_log_rows_of_the_wrong_type_are_read_whole_or_harmless(
    catalog: Catalog, loads: list[int], row: tuple[str, str, str]
) -> None:
    conn = catalog._conn
    index = whole(conn)
    registered(conn, kit("new", 2))
    store_random(conn, 1)
    revision, model, digest = row
    by_hand(
        conn,
        (
            f"INSERT INTO vector_changes (revision, model, content_hash) "
            f"VALUES ({revision}, {model}, {digest})",
            (MODEL,),
        ),
    )
    before = len(loads)
    index.refresh(conn, reader.revision(conn), MODEL)
    assert len(loads) - before in (0, 1)
    assert contents(index) == contents(whole(conn))


@pytest.mark.parametrize("value", ["'x'", "1.5", "-1", "x'01'"])
def test_a_log_start_written_by_hand_is_damage_at_open(
    tmp_path: Path, catalog: Catalog, value: str
) -> None:
    conn = catalog._conn
    conn.execute(f"UPDATE meta SET value = {value} WHERE key = 'vector_changes_from'")
    conn.commit()
    with pytest.raises(CatalogDamagedError, match="vector_changes_from"):
        Catalog(catalog.path)


@pytest.mark.parametrize("value", ["'x'", "1.5", "NULL", "x'01'"])
def test_a_log_start_of_the_wrong_type_is_read_whole(
    catalog: Catalog, loads: list[int], value: str
) -> None:
    """Changed under a process that opened the catalog before (no check at open then)."""
    conn = catalog._conn
    index = whole(conn)
    registered(conn, kit("new", 2))
    store_random(conn, 1)
    by_hand(conn, (f"UPDATE meta SET value = {value} WHERE key = 'vector_changes_from'", ()))
    forward(index, conn, loads, read=True)


def test_a_log_table_gone_under_a_process_is_read_whole(catalog: Catalog, loads: list[int]) -> None:
    conn = catalog._conn
    index = whole(conn)
    registered(conn, kit("new", 2))
    with writer.write_transaction(conn):  # the writer's own bump would trip on it
        conn.execute("DROP TABLE vector_changes")
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
    forward(index, conn, loads, read=True)
    with pytest.raises(CatalogDamagedError, match="vector_changes missing"):
        Catalog(catalog.path)


def test_a_log_flooded_by_hand_is_read_whole_within_the_limit(
    catalog: Catalog, loads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of hashes logged: no more than the limit is read before giving up."""
    monkeypatch.setattr(embeddings, "FORWARD_MIN", 50)
    conn = catalog._conn
    index = whole(conn)
    upcoming = reader.revision(conn) + 1
    by_hand(
        conn,
        *[
            (
                "INSERT INTO vector_changes (revision, model, content_hash) VALUES (?, ?, ?)",
                (upcoming, MODEL, f"{n:064x}"),
            )
            for n in range(5000)
        ],
    )
    asked: list[int] = []
    real = reader.vector_changes

    def counted(conn: sqlite3.Connection, after: int, model: str, limit: int) -> list[str] | None:
        asked.append(limit)
        return real(conn, after, model, limit)

    monkeypatch.setattr(reader, "vector_changes", counted)
    forward(index, conn, loads, read=True)
    assert asked == [50]


def test_one_definition_shared_by_many_tools_is_bounded(
    tmp_path: Path, loads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vector stored again for a definition 300 tools share: the tools are listed up to
    the limit, then the matrix is read whole."""
    monkeypatch.setattr(embeddings, "FORWARD_MIN", 100)
    with Catalog(tmp_path / "c.db") as catalog:
        same = [kit(f"k{n}", 1, words="shared") for n in range(300)]
        for toolkit in same:  # one definition: the same tool text in every toolkit
            toolkit.tools[0].description = "the same tool"
        catalog.register(same)
        conn = catalog._conn
        writer.set_meta(conn, {"embedding_model": MODEL, "embedding_dim": WIDTH})
        assert store_random(conn, 0) == 1
        index = whole(conn)
        assert index.tool_rows == 300
        seen: list[int] = []
        real = conn.execute

        def execute(sql: str, *args: object) -> sqlite3.Cursor:
            cursor = real(sql, *args)
            if sql.startswith("SELECT id FROM tools WHERE content_hash IN"):
                rows = cursor.fetchall()
                seen.append(len(rows))
                return real("SELECT value FROM json_each(?)", (str([r[0] for r in rows]),))
            return cursor

        store_random(conn, 1, everything=True)
        monkeypatch.setattr(conn, "execute", execute)
        forward(index, conn, loads, read=True)
        assert seen == [101]


def test_a_matrix_of_another_width_is_read_whole(catalog: Catalog, loads: list[int]) -> None:
    """Vectors of the same model stored again at another width (a model swapped by hand):
    read whole, which says so."""
    conn = catalog._conn
    index = whole(conn)
    hashes = [h for h, _ in reader.stale_vectors(conn, MODEL, everything=True)][:3]
    writer.store_vectors(conn, MODEL, [(h, np.ones(8, "<f4").tobytes()) for h in hashes])
    with pytest.raises(EmbeddingError, match="differ in length"):
        index.refresh(conn, reader.revision(conn), MODEL)
