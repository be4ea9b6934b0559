"""A BM25 index brought forward by the rows changed since it was built (``TantivyIndex.apply``,
the change log ``fts_changes``) answers exactly as an index built at the new revision: the
same tools, the same scores to the bit, the same certificate, filtered or not, after several
changes in a row, and once saved and loaded again."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.search.test_lexical_index import FILTERS, built, tagged_toolkits
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import bm25, lexical_file, native
from toolcat.search.lexical_index import TantivyIndex
from toolcat.store import reader

pytest.importorskip("tantivy")


@pytest.fixture(autouse=True)
def tantivy_first_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are of tantivy's first stage: the native one (native.py, its own tests in
    test_native.py) is left out."""
    monkeypatch.setattr(native, "ENABLED", False)


def forward(catalog: Catalog, index: TantivyIndex) -> TantivyIndex:
    with catalog._snapshot() as conn:
        changed = reader.fts_changes(conn, index.revision, 10**6)
        assert changed is not None
        return index.apply(conn, catalog.revision, changed)


def answers(
    catalog: Catalog, index: TantivyIndex, queries: list[str]
) -> list[list[tuple[int, float]]]:
    """Every query at k 1, 10 and 50, unfiltered and under each filter (bit-exact scores)."""
    found = []
    with catalog._snapshot() as conn:
        allowed_sets = [None, *(reader.allowed_ids(conn, f) for f in FILTERS)]
    for allowed in allowed_sets:
        for query in queries:
            terms = index.terms(query, bm25.MAX_QUERY_TERMS)
            for k in (1, 10, 50):
                found.append(index.rank(terms, k, allowed))
    return found


def _edited(kit: Toolkit, words: str) -> Toolkit:
    """The same tools, each description with ``words`` added (rows changed in place)."""
    tools = [t.model_copy(update={"description": f"{t.description} {words}"}) for t in kit.tools]
    return kit.model_copy(update={"tools": tools})


def changes(kits: list[Toolkit]) -> list[Any]:
    """Writes of every kind that changes tools_fts rows, each a step on one catalog."""
    new_words = Toolkit(
        name="flora",
        version="1.0.0",
        tools=[
            Tool(name="zygomorphic_lookup", description="Find zygomorphic flowers by petal"),
            Tool(name="weather_now", description="current weather for a city, file a report"),
        ],
    )
    return [
        lambda c: c.register(new_words),  # new rows, new terms
        lambda c: c.register(_edited(kits[2], "weather petal"), replace=True),  # rows replaced
        lambda c: c.register(kits[3].model_copy(update={"version": "2"})),  # a new version
        lambda c: c.deprecate(f"{kits[3].name}@2"),  # back to the old version's rows
        lambda c: c.remove(kits[4].name),  # rows gone
        lambda c: c.register(kits[4]),  # the same texts under new row ids
        lambda c: c.remove("flora"),  # every row of a new term gone
    ]


def test_each_change_brought_forward_answers_as_a_new_build(catalog: Catalog) -> None:
    kits, queries = tagged_toolkits(1500)
    catalog.register(kits)
    rng = random.Random(5)
    queries = [*queries[:40], "zygomorphic petal", "weather file report", "flowers"]
    queries += [" ".join(rng.sample(q.split(), min(3, len(q.split())))) for q in queries[:20]]
    index = built(catalog)
    for step, change in enumerate(changes(kits)):
        change(catalog)
        before, saved = index, index.state()
        index = forward(catalog, index)  # forward over forward: the changes add up
        with catalog._snapshot() as conn:
            changed = reader.fts_changes(conn, before.revision, 10**6) or []
        assert b"".join(index.forward_tools(saved, changed)) == b"".join(index._tools.values())
        fresh = built(catalog)
        assert index.revision == fresh.revision
        assert index.n_docs == fresh.n_docs and index.doc_freq == fresh.doc_freq, step
        assert index.names == fresh.names
        assert answers(catalog, index, queries) == answers(catalog, fresh, queries), step
        assert index.rounds[0] == 0  # every answer certified
    assert index._stale and index._delta_rows  # tantivy's part is still the first build's


def test_an_index_left_behind_is_not_changed_by_bringing_it_forward(catalog: Catalog) -> None:
    """Queries in flight keep the index they took: ``apply`` makes a new one."""
    kits, queries = tagged_toolkits(600)
    catalog.register(kits)
    index = built(catalog)
    terms = [index.terms(query, bm25.MAX_QUERY_TERMS) for query in queries[:40]]
    before = [index.rank(t, 10) for t in terms]
    catalog.remove(kits[0].name)
    assert forward(catalog, index).revision == catalog.revision != index.revision
    assert [index.rank(t, 10) for t in terms] == before


def test_a_brought_forward_index_saves_and_loads_as_it_answers(
    catalog: Catalog, db_path: Path
) -> None:
    kits, queries = tagged_toolkits(600)
    catalog.register(kits)
    index = built(catalog)
    root = lexical_file.trusted_folder(str(db_path), create=True)
    assert root is not None
    directory = lexical_file.new_tantivy_folder(root)
    first = TantivyIndex()
    with catalog._snapshot() as conn:
        first.build(conn, catalog.revision, bm25.DEFAULT_WEIGHTS, directory)
    for change in changes(kits)[:3]:
        change(catalog)
    index = forward(catalog, first)
    with catalog._snapshot() as conn:
        changed = reader.fts_changes(conn, first.revision, 10**6) or []
    joined = b"".join(index._tools.values())
    assert b"".join(index.forward_tools(first.state(), changed)) == joined  # the saved bytes
    with catalog._snapshot() as conn:
        valid_for = lexical_file.stamp(conn, catalog.revision, bm25.DEFAULT_WEIGHTS)
    lexical_file.save(root, valid_for, directory, index.state())
    loaded = lexical_file.load(str(db_path), valid_for)
    assert loaded is not None
    again = TantivyIndex()
    again.restore(catalog.revision, bm25.DEFAULT_WEIGHTS, *loaded)
    assert again._stale == index._stale and again._delta_rows == index._delta_rows
    assert answers(catalog, again, queries[:30]) == answers(catalog, built(catalog), queries[:30])


def test_the_log_says_what_each_write_changed(catalog: Catalog) -> None:
    kits, _ = tagged_toolkits(300)
    catalog.register(kits)
    start = catalog.revision
    with catalog._snapshot() as conn:
        assert reader.fts_changes(conn, start, 10**6) == []
        ids = [r[0] for r in conn.execute("SELECT rowid FROM tools_fts ORDER BY rowid")]
    catalog.remove(kits[0].name)
    with catalog._snapshot() as conn:
        gone = set(ids) - {r[0] for r in conn.execute("SELECT rowid FROM tools_fts")}
        assert gone and set(reader.fts_changes(conn, start, 10**6) or ()) >= gone
        assert reader.fts_changes(conn, start, len(gone) - 1) is None  # more than the limit
        assert reader.fts_changes(conn, start - 1, 10**6) is not None


def test_a_log_trimmed_past_an_index_or_reset_does_not_reach_back(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolcat.store import writer

    kits, _ = tagged_toolkits(600)
    catalog.register(kits[:1])
    start = catalog.revision
    monkeypatch.setattr(writer, "FTS_CHANGES_KEPT", 50)
    catalog.register(kits[1])  # 100 rows: more than the log keeps, none logged
    with catalog._snapshot() as conn:
        assert reader.fts_changes(conn, start, 10**6) is None
        assert reader.fts_changes(conn, catalog.revision, 10**6) == []
        assert conn.execute("SELECT count(*) FROM fts_changes WHERE row >= 0").fetchone()[0] == 0
    monkeypatch.setattr(writer, "FTS_CHANGES_KEPT", 150)
    middle = catalog.revision
    catalog.register(kits[2])
    after_one = catalog.revision
    catalog.register(kits[3])  # 200 rows logged: the older revision's trimmed
    with catalog._snapshot() as conn:
        assert reader.fts_changes(conn, middle, 10**6) is None
        assert len(reader.fts_changes(conn, after_one, 10**6) or ()) == 100
        assert conn.execute("SELECT count(*) FROM fts_changes WHERE row >= 0").fetchone()[0] == 100
    before = catalog.revision
    conn = catalog._conn  # every row written to the log, counted (trimmed rows too)
    conn.execute("CREATE TEMP TABLE written (row INTEGER)")
    conn.execute(
        "CREATE TEMP TRIGGER counted AFTER INSERT ON main.fts_changes WHEN new.row >= 0 "
        "BEGIN INSERT INTO written VALUES (new.row); END"
    )
    # 200 rows in one transaction, 100 a toolkit: the first toolkit's are written, the
    # second's push the sum past the 150 kept, so none more are and the log starts after it
    # (before, all 200 were written for the trim to delete)
    catalog.register(kits[4:6])
    assert conn.execute("SELECT count(*) FROM written").fetchone()[0] == 100
    with catalog._snapshot() as conn:
        assert reader.fts_changes(conn, before, 10**6) is None
        assert reader.fts_changes(conn, catalog.revision, 10**6) == []
        assert conn.execute("SELECT count(*) FROM fts_changes WHERE row >= 0").fetchone()[0] == 0
    monkeypatch.undo()
    now = catalog.revision
    with catalog._lock:
        writer.rebuild_fts(catalog._conn)
    with catalog._snapshot() as conn:
        assert reader.fts_changes(conn, now, 10**6) is None  # every row changed
        assert reader.fts_changes(conn, catalog.revision, 10**6) == []
