"""A batch that ends in a whole merge of the FTS5 index is written without FTS5's own
merging as it goes (``writer.BULK_FTS``): the same index, the settings put back, nothing of
it left by a batch that fails, and a small batch into a big catalog untouched."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from toolcat import Catalog, Toolkit
from toolcat.errors import ManifestError
from toolcat.store import writer
from toolcat.store.rows import rows_of


def toolkit(name: str, tools: int, version: str = "1.0.0", word: str = "record") -> Toolkit:
    return Toolkit.model_validate(
        {
            "toolkit": name,
            "version": version,
            "defer_loading": True,
            "tags": ["bulk"],
            "tools": [
                {
                    "name": f"tool_{i:04d}",
                    "description": f"Fetch {word} {i} of the {name} service, by id {i % 7}",
                    "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
                }
                for i in range(tools)
            ],
        }
    )


BATCH = [toolkit(f"kit{i:02d}", 100) for i in range(12)]  # 1,200 tools: past OPTIMIZE_AFTER


def settings(conn: sqlite3.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT k, v FROM tools_fts_config WHERE k != 'version'").fetchall())


def in_force(conn: sqlite3.Connection) -> dict[str, int]:
    """FTS5's settings as it uses them: its own defaults where no row says otherwise."""
    return {**writer.FTS_DEFAULTS, **settings(conn)}


def index_of(conn: sqlite3.Connection) -> tuple[list[tuple[object, ...]], ...]:
    """What FTS5 answers from: every term's documents and counts, and ranked matches."""
    vocab = conn.execute("SELECT term, doc, cnt FROM tools_fts_vocab ORDER BY term").fetchall()
    ranked = [
        conn.execute(
            "SELECT rowid, round(bm25(tools_fts), 9) FROM tools_fts WHERE tools_fts MATCH ? "
            "ORDER BY bm25(tools_fts), rowid LIMIT 20",
            (query,),
        ).fetchall()
        for query in ("fetch", "kit03 OR kit07", "record AND 5", "service")
    ]
    return (vocab, *ranked)


def register(conn: sqlite3.Connection, batch: list[Toolkit], seen: list[int]) -> None:
    """``register_stream`` over ``batch``, noting FTS5's automerge as each entry comes."""

    def check(_toolkit: Toolkit, _source: str | None) -> None:
        seen.append(in_force(conn)["automerge"])

    writer.register_stream(conn, ((t, None, rows_of(t)) for t in batch), replace=False, check=check)


def test_a_bulk_batch_writes_the_same_index_without_fts5s_own_merging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexes = {}
    for bulk in (True, False):
        if not bulk:
            monkeypatch.setattr(writer, "BULK_FTS", {})
        with Catalog(tmp_path / f"{bulk}.db") as catalog:
            conn = catalog._conn
            seen: list[int] = []
            register(conn, BATCH, seen)
            # FTS5 merged nothing as it went once the batch was sure to end in a whole merge
            # (from its tenth toolkit, 1,000 tools), and merges as before after it.
            assert seen[-1] == (0 if bulk else 4)
            assert in_force(conn) == writer.FTS_DEFAULTS
            indexes[bulk] = index_of(conn)
            assert len(catalog.search("fetch record 7 kit03", k=3).hits) == 3
    assert indexes[True] == indexes[False]
    assert indexes[True][0]  # a real index was compared


def test_a_failed_bulk_batch_leaves_fts5s_settings_as_they_were(tmp_path: Path) -> None:
    """The settings are rows of FTS5's config table written in the transaction: a batch
    refused at its end (one version defined twice, differently) takes them back with the
    rest."""
    with Catalog(tmp_path / "c.db") as catalog:
        conn = catalog._conn
        catalog.register(toolkit("first", 5))
        before, index = settings(conn), index_of(conn)
        twice = toolkit("kit00", 100, word="entry")  # kit00 1.0.0 again, other content
        seen: list[int] = []
        with pytest.raises(ManifestError, match="also defined, differently"):
            register(conn, [*BATCH, twice], seen)
        assert 0 in seen  # bulk settings were in force before the refusal
        assert settings(conn) == before
        assert index_of(conn) == index
        assert in_force(conn) == writer.FTS_DEFAULTS


def test_a_batch_small_beside_the_catalog_keeps_fts5s_merging(tmp_path: Path) -> None:
    """1,200 tools into a catalog of 4,000: no whole merge follows, so FTS5 tidies as it
    goes and no setting is written."""
    with Catalog(tmp_path / "c.db") as catalog:
        conn = catalog._conn
        catalog.register(*(toolkit(f"base{i:02d}", 100) for i in range(40)))
        before = settings(conn)
        seen: list[int] = []
        register(conn, BATCH, seen)
        assert set(seen) == {4}
        assert settings(conn) == before


def test_settings_an_admin_chose_are_put_back(tmp_path: Path) -> None:
    with Catalog(tmp_path / "c.db") as catalog:
        conn = catalog._conn
        conn.execute("INSERT INTO tools_fts (tools_fts, rank) VALUES ('automerge', 8)")
        seen: list[int] = []
        register(conn, BATCH, seen)
        assert seen[-1] == 0
        assert in_force(conn)["automerge"] == 8
