"""Outside attacks on the saved BM25 index brought forward by the change log (issue 32):
each case is a catalog whose log does not say what changed since the save, which must be
built again, never served as a new build would not answer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.search.test_postings import bench_toolkits
from toolcat import Catalog, Toolkit
from toolcat.search import lexical_file
from toolcat.search.bm25 import DEFAULT_WEIGHTS
from toolcat.search.lexical_index import TantivyIndex, _read_only
from toolcat.store import reader

pytest.importorskip("tantivy")


def _at_revision(path: Path) -> tuple[TantivyIndex, TantivyIndex]:
    """(the index saved beside the catalog, one built now), both at its revision."""
    conn = _read_only(str(path))
    try:
        conn.execute("BEGIN")
        revision = reader.revision(conn)
        saved = lexical_file.load(str(path), lexical_file.stamp(conn, revision, DEFAULT_WEIGHTS))
        assert saved is not None, "nothing saved at the catalog's revision"
        loaded = TantivyIndex()
        loaded.restore(revision, DEFAULT_WEIGHTS, *saved)
        built = TantivyIndex()
        built.build(conn, revision, DEFAULT_WEIGHTS)
    finally:
        conn.close()
    return loaded, built


def _built(path: Path) -> TantivyIndex:
    """An index built now, at the catalog's revision."""
    conn = _read_only(str(path))
    try:
        conn.execute("BEGIN")
        built = TantivyIndex()
        built.build(conn, reader.revision(conn), DEFAULT_WEIGHTS)
    finally:
        conn.close()
    return built


def _same_answers(loaded: TantivyIndex, built: TantivyIndex, queries: list[str]) -> None:
    assert loaded.n_docs == built.n_docs
    for query in queries:
        terms = built.terms(query, 8)
        assert loaded.terms(query, 8) == terms, query
        for k in (1, 5, 20):
            assert loaded.rank(terms, k) == built.rank(terms, k), query


def twelve_toolkits(tmp_path: Path) -> tuple[list[Toolkit], list[str], Path, Catalog]:
    """1,200 bfcl tools in 12 toolkits, registered in one block (the index saved once)."""
    kits, queries = bench_toolkits(1500)
    path = tmp_path / "c.db"
    catalog = Catalog(path)
    with catalog.bulk():
        for kit in kits[:12]:
            catalog.register(kit)
    return kits, queries, path, catalog


def test_a_catalog_restored_from_a_backup_is_not_brought_forward_by_another_history(
    tmp_path: Path,
) -> None:
    """The backup of revision R is put back where the catalog that went on to R+1 (and
    saved its index there) was; the restored one writes R+1 and R+2 in one ``bulk()``.
    Its log after R+1 names only R+2's rows: the saved index, R+1 of the other history,
    holds another toolkit at the row ids the restored R+1 wrote, with as many rows. It
    must be built again, not brought forward."""
    kits, queries = bench_toolkits(1500)
    path, backup = tmp_path / "c.db", tmp_path / "backup.db"
    catalog = Catalog(path)
    for kit in kits[:11]:
        catalog.register(kit)
    catalog.close()
    shutil.copy(path, backup)
    catalog = Catalog(path)
    catalog.register(kits[11])  # R+1 of the history the backup does not know; saved
    catalog.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copy(backup, path)  # the .bm25 folder beside it stays: "back up the .db alone"
    catalog = Catalog(path)
    with catalog.bulk():
        catalog.register(kits[12])  # R+1 here: the same row ids as kits[11] got there
        catalog.register(kits[13])
    catalog.close()
    _same_answers(*_at_revision(path), queries[:80])


def test_an_index_tantivy_cannot_bound_is_built_again_not_brought_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where padding would cost too much (``MAX_PADDED_LENGTH``: a catalog with a tool
    far longer than the rest), tantivy's scores do not bound FTS5's and a query rescores a
    fixed number of tantivy's best: best effort, whose answer depends on tantivy's own
    ranking. Brought forward, tantivy ranks by the statistics of the save and spends
    candidates on documents passed over, so it answered otherwise than a new build (13 of
    450 queries at k 1/5/20 on bfcl). Such an index is built again."""
    from toolcat.search import lexical_index

    monkeypatch.setattr(lexical_index, "MAX_PADDED_LENGTH", 1)
    kits, queries, path, catalog = twelve_toolkits(tmp_path)
    with catalog.bulk():
        catalog.register(kits[12])
        catalog.remove(kits[3].name)
        catalog.deprecate(kits[5].name, "1")
    catalog.close()
    loaded, built = _at_revision(path)
    assert not built.bounded
    _same_answers(loaded, built, queries[:150])


def test_tools_passed_over_do_not_crowd_out_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tantivy still holds the documents of tools changed since the save (passed over at
    query time), ranked as they were. When they fill every candidate a query may ask
    tantivy for (``MAX_CANDIDATES``: 4,096, while up to one tool in 50 may be passed over:
    from 205k tools on), the answer was cut to what little was left: a deprecated toolkit
    that said "weather" loudest hid every other weather tool. Here with a cap of 64 and
    200 tools passed over."""
    from toolcat import Tool, Toolkit
    from toolcat.search import lexical_index

    monkeypatch.setattr(lexical_index, "MAX_CANDIDATES", 64)
    kits, _ = bench_toolkits(1000)
    loud = Toolkit(
        name="loud",
        version="1",
        tools=[
            Tool(name=f"weather_{i}", description="weather weather weather forecast")
            for i in range(200)
        ],
    )
    quiet = Toolkit(
        name="quiet",
        version="1",
        tools=[
            Tool(name=f"tool_{i}", description=f"reads the weather among other things {i}")
            for i in range(10)
        ],
    )
    path = tmp_path / "c.db"
    catalog = Catalog(path)
    with catalog.bulk():
        for kit in [*kits, loud, quiet]:
            catalog.register(kit)
    catalog.deprecate("loud", "1")
    catalog.close()
    loaded, built = _at_revision(path)
    assert len(loaded._stale) == 200  # brought forward, not built
    for k in (1, 5, 10):
        assert len(built.rank(["weather"], k)) == k
        assert loaded.rank(["weather"], k) == built.rank(["weather"], k)


@pytest.mark.parametrize("total", [0, 1, 10**7])
def test_an_earlier_save_with_a_forged_token_total_is_built_again(
    tmp_path: Path, total: int
) -> None:
    """The stamp (not covered by the data's digest) of the save a write brings forward says
    its tools add up to another token total, and names it as FTS5's too: every score
    divides by the average length brought forward from it, so every answer of the process
    that brought it forward was wrong (and saved so, a negative total). The packed tools'
    own lengths are what it must be. (At the catalog's own revision, a total of 0 raised
    ZeroDivisionError from every search: test_lexical_file's forged figures.)"""
    import json

    from toolcat.search.lexical_index import save_current

    kits, queries, path, catalog = twelve_toolkits(tmp_path)
    stamp = lexical_file.folder(str(path)) / lexical_file.STAMP
    header = json.loads(stamp.read_text())
    header["meta"]["length_total"] = header["tokens"] = total
    stamp.write_text(json.dumps(header))
    with catalog.bulk(save_index=False):
        catalog.deprecate(kits[2].name, "1")
    catalog.close()
    served = save_current(str(path), DEFAULT_WEIGHTS)
    assert served is not None
    _same_answers(served, _built(path), queries[:40])


def test_a_restored_catalog_at_the_same_revision_does_not_take_up_the_other_history_save(
    tmp_path: Path,
) -> None:
    """As above, but the restored catalog writes one revision, as many rows and tokens as
    the other history wrote there: its stamp (revision, rows, tokens) matched the save
    beside it, which was taken up as current, another toolkit's words at its row ids."""
    from toolcat import Tool, Toolkit

    kits, queries = bench_toolkits(1100)

    def twin(word: str) -> Toolkit:
        return Toolkit(
            name=f"{word}kit",
            version="1",
            tools=[
                Tool(name=f"{word}_{i}", description=f"{word} records number {i}")
                for i in range(40)
            ],
        )

    path, backup = tmp_path / "c.db", tmp_path / "backup.db"
    catalog = Catalog(path)
    with catalog.bulk():
        for kit in kits[:11]:
            catalog.register(kit)
    catalog.close()
    shutil.copy(path, backup)
    catalog = Catalog(path)
    catalog.register(twin("zebra"))
    catalog.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copy(backup, path)
    catalog = Catalog(path)
    catalog.register(twin("quokka"))
    catalog.close()
    loaded, built = _at_revision(path)
    assert loaded.rank(["quokka"], 5) == built.rank(["quokka"], 5) != []
    _same_answers(loaded, built, queries[:40])
