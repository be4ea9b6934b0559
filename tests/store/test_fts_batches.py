"""A registration inserts its ``tools_fts`` rows in batches (``writer.PendingFts``): what
the index holds is what one toolkit at a time gives, whatever the batch size, through new
versions, replacements and learned queries in one call, and a failed call leaves nothing."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog
from toolcat.errors import VersionConflictError
from toolcat.store import writer

from ..helpers import table_snapshot, toolkit_data, write_manifest


def _tools(prefix: str, n: int, words: str) -> list[dict[str, Any]]:
    return [
        {
            "name": f"{prefix}_{i}",
            "description": f"{words} number {i} of {prefix}.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": f"{words} city"}},
            },
        }
        for i in range(n)
    ]


def _manifests(folder: Path) -> list[Path]:
    """A batch: plain toolkits, two versions of one toolkit (the newer second, then an
    older one), and a new content for a version registered before the batch."""
    folder.mkdir()
    datas = [
        toolkit_data(f"kit{k}", tools=_tools(f"t{k}", 3, f"forecast ledger {k}")) for k in range(7)
    ]
    datas += [
        toolkit_data("twice", "1.0.0", tools=_tools("tw", 4, "first wording")),
        toolkit_data("twice", "2.0.0", tools=_tools("tw", 5, "second wording")),
        toolkit_data("twice", "0.5.0", tools=_tools("tw", 2, "oldest wording")),
        toolkit_data("before", "1.0.0", tools=_tools("bf", 3, "replaced wording")),
    ]
    return [
        write_manifest(folder, data, ".json", name=f"{i:02d}-{data['toolkit']}")
        for i, data in enumerate(datas)
    ]


def _catalog(path: Path) -> Catalog:
    catalog = Catalog(path, create=True)
    catalog.learning = True
    catalog.register(
        write_manifest(path.parent, toolkit_data("before", tools=_tools("bf", 3, "prior")), ".json")
    )
    catalog.record_use("zorbify the quarterly ledger", "before.bf_1")
    return catalog


def _index(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO tools_fts (tools_fts) VALUES ('integrity-check')")
        return conn.execute(
            "SELECT f.rowid, k.name, k.version, t.name, f.name, f.hint, f.description, "
            "f.params, f.tags FROM tools_fts f JOIN tools t ON t.id = f.rowid "
            "JOIN toolkits k ON k.id = t.toolkit_id ORDER BY f.rowid"
        ).fetchall()
    finally:
        conn.close()


def _hits(catalog: Catalog, query: str) -> list[tuple[str, str]]:
    return [(h.tool.toolkit, h.tool.name) for h in catalog.search(query, k=5).hits]


def test_batched_fts_rows_are_what_one_toolkit_at_a_time_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_by_one = tmp_path / "one" / "c.db"
    one_by_one.parent.mkdir()
    manifests = _manifests(tmp_path / "batch")
    with _catalog(one_by_one) as catalog:
        for manifest in manifests:
            catalog.register(manifest, replace=True)
        expected = _index(one_by_one)
        expected_hits = _hits(catalog, "second wording city")
    assert any("zorbifi" in row[-1] for row in expected)  # the learned query, stemmed
    assert {(row[1], row[2]) for row in expected if row[1] == "twice"} == {("twice", "2.0.0")}
    for size in (1, 3, 4, 10_000):
        monkeypatch.setattr(writer, "FTS_BATCH_ROWS", size)
        path = tmp_path / f"b{size}" / "c.db"
        path.parent.mkdir()
        with _catalog(path) as catalog:
            catalog.register(manifests, replace=True)
            assert _index(path) == expected, size
            assert _hits(catalog, "second wording city") == expected_hits


def test_a_failed_batch_leaves_nothing_of_the_rows_it_had_inserted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "FTS_BATCH_ROWS", 2)  # rows are inserted before it fails
    path = tmp_path / "c.db"
    flushed: list[int] = []
    flush = writer.PendingFts.flush

    def counted(self: writer.PendingFts) -> None:
        flushed.append(len(self._rows))
        flush(self)

    monkeypatch.setattr(writer.PendingFts, "flush", counted)
    with _catalog(path) as catalog:
        before = table_snapshot(path)
        manifests = _manifests(tmp_path / "batch")
        with pytest.raises(VersionConflictError):  # "before" 1.0.0 differs, no replace
            catalog.register(manifests)
        assert sum(flushed) >= 21  # the seven toolkits' rows went into FTS5 first
        assert table_snapshot(path) == before
        assert {toolkit for toolkit, _ in _hits(catalog, "forecast ledger")} == {"before"}


def _merge_settings(db: Path) -> dict[str, Any]:
    conn = sqlite3.connect(db)
    try:
        return dict(
            conn.execute(
                "SELECT k, v FROM tools_fts_config WHERE k IN ('automerge', 'crisismerge')"
            ).fetchall()
        )
    finally:
        conn.close()


def _segments(db: Path) -> int:
    """FTS5's segments (each has its own ``segid`` in ``tools_fts_idx``)."""
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(DISTINCT segid) FROM tools_fts_idx").fetchone()[0])
    finally:
        conn.close()


def _fts_answers(db: Path) -> list[list[int]]:
    conn = sqlite3.connect(db)
    try:
        return [
            [
                row[0]
                for row in conn.execute(
                    "SELECT rowid FROM tools_fts WHERE tools_fts MATCH ? ORDER BY bm25(tools_fts),"
                    " rowid",
                    (query,),
                )
            ]
            for query in ("forecast", "ledger", "citi", "number", "kit", "3", "word")
        ]
    finally:
        conn.close()


@pytest.mark.parametrize("fill", [True, False])
def test_filling_an_empty_index_merges_once_and_leaves_fts5s_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fill: bool
) -> None:
    """Into an empty index FTS5 merges nothing as rows come (``writer._filling``), then the
    registration's ``optimize`` merges everything: FTS5 answers as it does when it merged
    all along, and its merge settings are FTS5's defaults again afterwards."""
    monkeypatch.setattr(writer, "FTS_BATCH_ROWS", 5)
    monkeypatch.setattr(writer, "OPTIMIZE_AFTER", 1)
    if not fill:
        monkeypatch.setattr(writer, "_filling", lambda conn: contextlib.nullcontext())
    folder = tmp_path / "many"
    folder.mkdir()
    for k in range(40):
        data = toolkit_data(f"kit{k}", tools=_tools(f"t{k}", 6, f"forecast ledger {k} wording"))
        write_manifest(folder, data, ".json", name=f"{k:02d}")
    db = tmp_path / "c.db"
    Catalog(db, create=True).register([folder])
    assert _merge_settings(db) == ({"automerge": 4, "crisismerge": 16} if fill else {})
    answers = _fts_answers(db)
    assert answers[0] and all(answers)
    if fill:
        other = tmp_path / "other.db"
        monkeypatch.setattr(writer, "_filling", lambda conn: contextlib.nullcontext())
        Catalog(other, create=True).register([folder])
        assert _fts_answers(other) == answers
        assert _segments(other) == _segments(db) == 1  # both merged whole by ``optimize``


def test_a_catalog_already_indexed_keeps_merging_as_rows_come(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    catalog = _catalog(db)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO tools_fts (tools_fts, rank) VALUES ('automerge', 8)")
    conn.commit()
    conn.close()
    seen: list[dict[str, Any]] = []
    original = writer.PendingFts.flush

    def flush(self: Any) -> None:  # while the registration's rows are written
        query = "SELECT k, v FROM tools_fts_config WHERE k = 'automerge'"
        seen.append(dict(self._conn.execute(query).fetchall()))
        original(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer.PendingFts, "flush", flush)
        catalog.register(_manifests(tmp_path / "batch"), replace=True)
    assert seen and all(setting == {"automerge": 8} for setting in seen)
    assert _merge_settings(db)["automerge"] == 8


def test_a_failed_filling_leaves_fts5s_settings_as_they_were(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    write_manifest(folder, toolkit_data("good", tools=_tools("g", 3, "fine")), ".json", name="a")
    write_manifest(
        folder, toolkit_data("good", tools=_tools("g", 4, "other")), ".json", name="b"
    )  # the same version defined twice, differently: the whole call fails at its end
    db = tmp_path / "c.db"
    catalog = Catalog(db, create=True)
    with pytest.raises(Exception, match="also defined"):
        catalog.register([folder])
    assert _merge_settings(db) == {}
    catalog.register([folder / "a.json"])
    assert _merge_settings(db) == {"automerge": 4, "crisismerge": 16}


@pytest.mark.parametrize("stored", [100, -3, "eight", None, 2.5, 64, 0])
def test_odd_stored_merge_settings_do_not_fail_a_registration(
    tmp_path: Path, stored: object
) -> None:
    """A value FTS5 would refuse to set (stored by hand in its config table: FTS5 ignores it
    and uses its default) is put back as that default; one it accepts, as it was."""
    db = tmp_path / "c.db"
    catalog = Catalog(db, create=True)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO tools_fts_config (k, v) VALUES ('automerge', ?)", (stored,))
    conn.commit()
    conn.close()
    folder = tmp_path / "kits"
    folder.mkdir()
    write_manifest(folder, toolkit_data("kit", tools=_tools("k", 3, "fine")), ".json", name="a")
    catalog.register([folder])
    kept = stored if stored in (64, 0) else 4
    assert _merge_settings(db) == {"automerge": kept, "crisismerge": 16}
    assert catalog.search("fine", mode="bm25").hits


def test_a_full_rebuild_fills_its_emptied_index_the_same_way(tmp_path: Path) -> None:
    """``reindex --full`` (``writer.rebuild_fts``) empties FTS5's index and fills it again:
    merges wait for its ``optimize`` there too, and FTS5 answers as before."""
    folder = tmp_path / "many"
    folder.mkdir()
    for k in range(12):
        data = toolkit_data(f"kit{k}", tools=_tools(f"t{k}", 5, f"forecast ledger {k} wording"))
        write_manifest(folder, data, ".json", name=f"{k:02d}")
    db = tmp_path / "c.db"
    catalog = Catalog(db, create=True)
    catalog.register([folder])
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM tools_fts_config WHERE k IN ('automerge', 'crisismerge')")
    conn.commit()
    conn.close()
    answers = _fts_answers(db)
    seen: list[dict[str, Any]] = []
    original = writer._index

    def index(conn: sqlite3.Connection, *args: Any) -> None:
        query = "SELECT k, v FROM tools_fts_config WHERE k IN ('automerge', 'crisismerge')"
        seen.append(dict(conn.execute(query).fetchall()))
        original(conn, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer, "_index", index)
        assert writer.rebuild_fts(catalog._conn) == 60
    assert seen and all(s == {"automerge": 0, "crisismerge": 64} for s in seen)
    assert _merge_settings(db) == {"automerge": 4, "crisismerge": 16}
    assert _fts_answers(db) == answers
    assert _segments(db) == 1
