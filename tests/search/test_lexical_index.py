"""The tantivy-backed index returns FTS5's exact scores and (nearly always) FTS5's ranking,
is never served at another revision, and gives way to the pure-Python postings where
tantivy cannot be imported."""

from __future__ import annotations

import gc
import json
import math
import random
import struct
import subprocess
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.search.test_postings import bench_toolkits, exact_fts5
from toolcat import Catalog, Policy, TagFilter, Tool, Toolkit
from toolcat.search import bm25, native
from toolcat.search.engine import POSTINGS_AFTER
from toolcat.search.lexical_index import LexicalIndex, TantivyIndex, repeats
from toolcat.search.postings import PostingsIndex
from toolcat.store import reader
from toolcat.store.reader import Filters
from toolcat.text.tokenize import tokenize

pytest.importorskip("tantivy")


@pytest.fixture(autouse=True)
def tantivy_first_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are of tantivy's first stage: the native one (native.py, its own tests in
    test_native.py) is left out."""
    monkeypatch.setattr(native, "ENABLED", False)


def built(catalog: Catalog) -> TantivyIndex:
    index = TantivyIndex()
    with catalog._snapshot() as conn:
        index.build(conn, catalog.revision, bm25.DEFAULT_WEIGHTS)
    return index


def test_rankings_and_scores_are_fts5s_on_real_tools(catalog: Catalog) -> None:
    kits, queries = bench_toolkits()
    catalog.register(kits)
    index = built(catalog)
    assert index.bounded
    rng = random.Random(11)
    queries += [" ".join(rng.sample(q.split(), min(3, len(q.split())))) for q in queries[:50]]
    compared = 0
    for query in queries:
        for k in (1, 10, 50):
            expected = exact_fts5(catalog, query, k)
            got = index.search(query, k, bm25.MAX_QUERY_TERMS)
            assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-6)
            # Same tools wherever scores differ by more than rounding (ties may swap).
            if len({round(s, 5) for _, s in expected}) == len(expected):
                assert [i for i, _ in got] == [i for i, _ in expected], query
            compared += 1
    assert compared >= 600
    assert index.rounds[0] == 0  # every answer certified


def test_tantivys_score_bounds_fts5s_from_above(catalog: Catalog) -> None:
    """The certificate rests on this: padded lengths and boosts make tantivy's BM25 of a
    tool at least FTS5's (and close to it)."""
    kits, queries = bench_toolkits(800)
    catalog.register(kits)
    index = built(catalog)
    tantivy = pytest.importorskip("tantivy")
    ratios = []
    for query in queries[:80]:
        terms = index.terms(query, bm25.MAX_QUERY_TERMS)
        if not terms:
            continue
        index.rank(terms, 1)  # makes the term queries
        clauses = [(tantivy.Occur.Should, index._queries[t]) for t in terms]
        hits = index._searcher.search(tantivy.Query.boolean_query(clauses), 40).hits
        for score, address in hits:
            exact = sum(index.contribution(index._row_ids[address.doc], t) for t in terms)
            ratios.append(score / exact)
    assert len(ratios) > 500
    assert min(ratios) >= 1 - 1e-5
    assert sorted(ratios)[len(ratios) // 2] < 1.02


def test_top_k_matches_the_postings_index_for_every_k(catalog: Catalog) -> None:
    kits, queries = bench_toolkits(600)
    catalog.register(kits)
    index = built(catalog)
    postings = PostingsIndex()
    with catalog._snapshot() as conn:
        postings.build(conn, catalog.revision, bm25.DEFAULT_WEIGHTS)
    for k in (1, 3, 50):
        for query in queries[:60]:
            got = index.search(query, k, bm25.MAX_QUERY_TERMS)
            want = postings.search(query, k, bm25.MAX_QUERY_TERMS)
            assert len(got) == len(want)
            assert got[0] == pytest.approx(want[0]) if want else got == []


def test_several_segments_map_through_the_id_field(catalog: Catalog) -> None:
    kits, queries = bench_toolkits(300)
    catalog.register(kits)
    index = built(catalog)
    by_position = [index.search(q, 10, bm25.MAX_QUERY_TERMS) for q in queries[:40]]
    index._row_ids = []  # as when tantivy wrote more than one segment
    assert [index.search(q, 10, bm25.MAX_QUERY_TERMS) for q in queries[:40]] == by_position


def test_column_weights_become_repeats() -> None:
    assert repeats(bm25.DEFAULT_WEIGHTS) == [8, 4, 3, 1, 1]
    assert repeats((1.0, 0.0, 100.0)) == [1, 0, 16]
    assert repeats((0.0, 0.0)) == [0, 0]


def test_a_change_from_another_connection_is_never_answered_from_the_old_index(
    db_path: Path,
) -> None:
    with Catalog(db_path) as server, Catalog(db_path) as admin:
        server.register(SAMPLE_TOOLKITS)
        for _ in range(POSTINGS_AFTER):
            before = server.search("wipe a file for good", mode="bm25", k=3)
        engine = server._search
        assert engine.postings.backend == "tantivy"
        assert engine.postings.current(server.revision, bm25.DEFAULT_WEIGHTS)
        assert "shredder.shred_file" not in [h.tool.id for h in before.hits]
        admin.register(
            Toolkit(
                name="shredder",
                version="1",
                tools=[Tool(name="shred_file", description="Wipe a file for good")],
            )
        )
        after = server.search("wipe a file for good", mode="bm25", k=3)
        assert after.revision == admin.revision > before.revision
        assert after.hits[0].tool.id == "shredder.shred_file"
        # The index of the old revision is still in memory, but was not asked: FTS5 was.
        assert engine.postings.revision == before.revision
        for _ in range(POSTINGS_AFTER):
            again = server.search("wipe a file for good", mode="bm25", k=3)
        assert engine.postings.revision == admin.revision
        assert [h.tool.id for h in again.hits] == [h.tool.id for h in after.hits]
        # Removing the tool: gone from the next answer, whichever path gives it.
        admin.remove("shredder")
        gone = server.search("wipe a file for good", mode="bm25", k=3)
        assert "shredder.shred_file" not in [h.tool.id for h in gone.hits]


def test_failed_build_leaves_nothing_to_serve(catalog: Catalog) -> None:
    catalog.register(SAMPLE_TOOLKITS)
    index = LexicalIndex("tantivy")
    with catalog._snapshot() as conn:
        index.build(conn, catalog.revision, bm25.DEFAULT_WEIGHTS)
    assert index.current(catalog.revision, bm25.DEFAULT_WEIGHTS)
    with catalog._snapshot() as conn, pytest.raises(ValueError):
        index.build(conn, catalog.revision + 1, (1.0, 2.0))  # wrong column count
    assert index.index is None
    assert not index.current(catalog.revision, bm25.DEFAULT_WEIGHTS)


FALLBACK = """
import json, sys
sys.modules["tantivy"] = None  # as if it were not installed
from toolcat import Catalog
with Catalog({db!r}) as catalog:
    ranked = [
        [(h.tool.id, h.score) for h in catalog.search(q, mode="bm25", k=5).hits]
        for q in {queries!r} for _ in range(2)
    ]
    print(json.dumps({{"backend": catalog._search.postings.backend, "ranked": ranked}}))
"""


def last_json_line(code: str) -> Any:
    """What a fresh Python process running ``code`` prints last, as JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_without_tantivy_the_postings_index_serves_the_same_hits(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    queries = ["delete a file", "convert units of temperature", "send an email to a user"]
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        ranked = [
            [(h.tool.id, h.score) for h in catalog.search(q, mode="bm25", k=5).hits]
            for q in queries
            for _ in range(2)
        ]
        assert catalog._search.postings.backend == "tantivy"
    fallback = last_json_line(FALLBACK.format(db=str(db), queries=queries))
    assert fallback["backend"] == "postings"
    assert fallback["ranked"] == [[list(hit) for hit in hits] for hits in ranked]


def test_a_one_shot_search_never_imports_tantivy(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    code = (
        f"import sys, toolcat\ntoolcat.Catalog({str(db)!r}).search('convert units', "
        "mode='bm25')\nprint('tantivy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_tantivy_that_fails_to_build_gives_way_to_the_postings(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.register(SAMPLE_TOOLKITS)
    for _ in range(POSTINGS_AFTER):
        catalog.search("delete a file", mode="bm25", k=5)
    assert catalog._search.postings.backend == "tantivy"
    catalog.register(Toolkit(name="extra", version="1", tools=[Tool(name="noop", description="x")]))

    def old_tantivy(*_: object) -> None:
        raise AttributeError("'Searcher' object has no attribute 'fast_field_values'")

    monkeypatch.setattr(TantivyIndex, "build", old_tantivy)
    for _ in range(POSTINGS_AFTER):
        got = catalog.search("delete a file", mode="bm25", k=5)
    lexical = catalog._search.postings
    assert lexical.backend == "postings" and "fast_field_values" in lexical.error
    assert isinstance(lexical.index, PostingsIndex)
    assert lexical.current(catalog.revision, bm25.DEFAULT_WEIGHTS)
    expected = exact_fts5(catalog, "delete a file", 5)
    assert [h.score for h in got.hits] == pytest.approx([round(s, 6) for _, s in expected])


def test_weights_that_are_not_multiples_still_give_fts5s_scores(catalog: Catalog) -> None:
    kits, queries = bench_toolkits(600)
    catalog.register(kits)
    weights = (4.0, 2.0, 1.3, 0.5, 0.7)
    index = TantivyIndex()
    with catalog._snapshot() as conn:
        index.build(conn, catalog.revision, weights)
    assert not index.bounded
    stats = bm25.TermStats()
    stats.refresh(catalog._conn, catalog.revision)
    same = 0
    for query in queries[:80]:
        expected = bm25.search(
            catalog._conn, query, Filters(), 10, stats, weights, exact_postings=10**12
        )
        everything = dict(
            bm25.search(catalog._conn, query, Filters(), 1000, stats, weights, 10**12)
        )
        got = index.search(query, 10, bm25.MAX_QUERY_TERMS)
        for row_id, score in got:
            assert score == pytest.approx(everything[row_id], abs=1e-6)
        same += [i for i, _ in got] == [i for i, _ in expected]
    assert same >= 0.9 * 80  # no certificate here: a fixed depth of candidates


def test_term_statistics_come_from_the_index_once_built(catalog: Catalog) -> None:
    kits, queries = bench_toolkits(400)
    catalog.register(kits)
    for query in queries[:POSTINGS_AFTER]:
        catalog.search(query, mode="bm25")
    stats = catalog._search.term_stats
    assert stats.complete and stats.revision == catalog.revision
    fresh = bm25.TermStats()
    fresh.refresh(catalog._conn, catalog.revision)
    terms = [*sorted({t for q in queries[:40] for t in tokenize(q)}), "zzzabsentterm"]
    assert stats.lookup(catalog._conn, terms) == fresh.lookup(catalog._conn, terms)
    assert (stats.n_docs, stats.total_tokens) == (fresh.n_docs, fresh.total_tokens)
    catalog.register(Toolkit(name="late", version="1", tools=[Tool(name="x", description="y")]))
    catalog.search(queries[0], mode="bm25")  # FTS5 again: the revision moved
    assert not stats.complete and stats.revision == catalog.revision


def test_empty_and_tiny_catalogs(catalog: Catalog) -> None:
    index = built(catalog)
    assert index.search("anything at all", 10, bm25.MAX_QUERY_TERMS) == []
    catalog.register(
        Toolkit(name="one", version="1", tools=[Tool(name="read_file", description="Read a file")])
    )
    index = built(catalog)
    got = index.search("read the file", 10, bm25.MAX_QUERY_TERMS)
    assert [s for _, s in got] == pytest.approx(
        [s for _, s in exact_fts5(catalog, "read the file", 10)]
    )
    assert len(got) == 1


def test_a_tantivy_whose_scores_do_not_bound_fts5s_loses_the_certificate(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    kits, queries = bench_toolkits(300)
    catalog.register(kits)
    assert built(catalog).bounded
    real_log = math.log

    def idf_off(x: float) -> float:  # every IDF 1.5x: contributions outgrow tantivy's scores
        return real_log(x) * (1.5 if x > 1.0 else 1.0)

    monkeypatch.setattr("toolcat.search.lexical_index.math.log", idf_off)
    index = built(catalog)
    monkeypatch.undo()
    assert not index.bounded
    assert index.search(queries[0], 10, bm25.MAX_QUERY_TERMS)  # still answers, fixed depth


def tagged_toolkits(limit: int = 1500) -> tuple[list[Toolkit], list[str]]:
    """bench_toolkits with tags and deferral that filters can pick tools by."""
    kits, queries = bench_toolkits(limit)
    retagged = []
    for kit in kits:
        tools = []
        for tool in kit.tools:
            i = len(tools) + 100 * len(retagged)
            tags = ["bench", *(["odd"] if i % 2 else []), *(["third"] if i % 3 == 0 else [])]
            tags += ["rare"] if i % 50 == 7 else []
            tools.append(tool.model_copy(update={"tags": tags, "defer_loading": i % 4 == 0}))
        retagged.append(kit.model_copy(update={"tools": tools}))
    return retagged, queries


FILTERS = [
    Filters(tags=TagFilter.of(("odd",))),  # half the tools: tantivy asked deeper
    Filters(tags=TagFilter.of(("odd", "third"))),
    Filters(tags=TagFilter.of(("rare",))),  # 2%: every allowed tool scored
    Filters(toolkit="kit3"),
    Filters(include_deferred=False),
    Filters(hide=(Policy(deny=("tag:third", "kit1.*")),)),
    Filters(tags=TagFilter.of(("nowhere",))),
]


@pytest.mark.parametrize("backend", ["tantivy", "postings"])
def test_filtered_rankings_are_fts5s_filtered_rankings(catalog: Catalog, backend: str) -> None:
    kits, queries = tagged_toolkits()
    catalog.register(kits)
    index: TantivyIndex | PostingsIndex = (
        TantivyIndex() if backend == "tantivy" else PostingsIndex()
    )
    conn = catalog._conn
    index.build(conn, catalog.revision, bm25.DEFAULT_WEIGHTS)
    stats = bm25.TermStats()
    stats.refresh(conn, catalog.revision)
    compared = 0
    for filters in FILTERS:
        allowed = reader.allowed_ids(conn, filters)
        for query in queries[:50]:
            for k in (1, 10, 50):
                expected = bm25.search(conn, query, filters, k, stats, exact_postings=10**12)
                got = index.rank(index.terms(query, bm25.MAX_QUERY_TERMS), k, allowed)
                assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-6)
                if len({round(s, 5) for _, s in expected}) == len(expected):
                    assert [i for i, _ in got] == [i for i, _ in expected], (filters, query)
                assert set(i for i, _ in got) <= allowed
                compared += bool(expected)
    assert compared >= 700
    if isinstance(index, TantivyIndex):  # both ways of filtering ran, every answer certified
        assert index.rounds[-1] and index.rounds[1] and not index.rounds[0]


def test_scoped_searches_are_answered_from_the_index_of_their_revision(db_path: Path) -> None:
    kits, queries = tagged_toolkits(600)
    with Catalog(db_path) as server, Catalog(db_path) as admin:
        server.register(kits)
        first = [server.search(q, mode="bm25", k=5, tags=["odd"]) for q in queries[:30]]
        index = server._search.postings.index
        assert isinstance(index, TantivyIndex) and index.revision == server.revision
        asked = sum(index.rounds.values())
        server._search.answers.clear()  # ranked again, not answered from kept answers
        again = [server.search(q, mode="bm25", k=5, tags=["odd"]) for q in queries[:30]]
        assert sum(index.rounds.values()) == asked + 30  # the index answered them
        assert [[(h.tool.id, h.score) for h in r.hits] for r in again] == [
            [(h.tool.id, h.score) for h in r.hits] for r in first
        ]
        admin.register(
            Toolkit(
                name="late",
                version="1",
                tags=["odd"],
                tools=[Tool(name="wipe_file", description="Wipe a file for good")],
            )
        )
        for _ in range(POSTINGS_AFTER + 1):  # FTS5 first, then the new revision's index
            found = server.search("wipe a file for good", mode="bm25", k=3, tags=["odd"])
            assert found.hits[0].tool.id == "late.wipe_file"
        assert server._search.postings.revision == admin.revision
        third = server.search("wipe a file for good", mode="bm25", k=50, tags=["third"])
        assert "late.wipe_file" not in [h.tool.id for h in third.hits]


def test_a_filter_tantivy_cannot_certify_within_its_depth_scores_every_allowed_tool(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    kits, queries = tagged_toolkits(600)
    catalog.register(kits)
    index = built(catalog)
    monkeypatch.setattr("toolcat.search.lexical_index.MAX_CANDIDATES", 40)
    conn = catalog._conn
    stats = bm25.TermStats()
    stats.refresh(conn, catalog.revision)
    filters = Filters(tags=TagFilter.of(("third",)))
    allowed = reader.allowed_ids(conn, filters)
    for query in queries[:40]:
        expected = bm25.search(conn, query, filters, 20, stats, exact_postings=10**12)
        got = index.rank(index.terms(query, bm25.MAX_QUERY_TERMS), 20, allowed)
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-6)
    assert index.rounds[-1] and not index.rounds[0]  # fell back to scoring, never uncertified


def test_tools_that_tie_in_fts5_tie_here_and_keep_the_lower_row_id_first(
    catalog: Catalog,
) -> None:
    """Tools that match different query terms of equal weight (``tool0`` and ``tool1`` for
    a query with both digits) tie in FTS5, which sums in the query's term order, and come
    lowest row id first. Summed in a set's order, their scores differed by an ulp that
    depends on the process's string hashes: the order then did too."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    tools = [
        Tool(name=f"{words[g % 8]}{g}_tool{digit}", description=f"Handle the {words[g * 3 % 8]}")
        for g in range(100)
        for digit in range(4)
    ]
    catalog.register(Toolkit(name="ties", version="1", tools=tools))
    index = built(catalog)
    conn = catalog._conn
    stats = bm25.TermStats()
    stats.refresh(conn, catalog.revision)
    allowed = reader.allowed_ids(conn, Filters(toolkit="ties"))
    for g in range(100):
        query = f"{words[g % 8]}{g}_tool0 1 2 3 {words[g * 3 % 8]}"
        expected = bm25.search(conn, query, Filters(), 4, stats)
        assert len({s for _, s in expected}) < len(expected)  # ties, ordered by row id
        terms = index.terms(query, bm25.MAX_QUERY_TERMS)
        few = frozenset(i for i, _ in bm25.search(conn, query, Filters(), 20, stats))
        for within in (None, allowed, few):  # unfiltered, deeper candidates, every one scored
            ranked = index.rank(terms, 4, within)
            assert [i for i, _ in ranked] == [i for i, _ in expected], query
            assert [s for _, s in ranked] == pytest.approx([s for _, s in expected], abs=1e-9)
    assert index.rounds[-1] and sum(index.rounds.values()) > index.rounds[-1] > 0


SCOPED_FALLBACK = """
import json, sys
sys.modules["tantivy"] = None  # as if it were not installed
from toolcat import Catalog, Policy
with Catalog({db!r}, policy=Policy(deny=["tag:destructive", "sqlite.*"])) as catalog:
    ranked = [
        [(h.tool.id, h.score, h.match) for h in catalog.search(q, mode="bm25", k=k, **ask).hits]
        for ask in {asks!r} for q in {queries!r} for k in (1, 50) for _ in range(2)
    ]
    print(json.dumps({{"backend": catalog._search.postings.backend, "ranked": ranked}}))
"""


def test_without_tantivy_scoped_searches_serve_the_same_hits(tmp_path: Path) -> None:
    """Tags, a toolkit, no deferred tools and a deny policy, ranked by the postings index
    in a process without tantivy, as a fresh catalog (FTS5) ranks them."""
    db = tmp_path / "catalog.db"
    queries = ["delete a file", "convert units of temperature", "run a sql query", "read_file"]
    asks: list[dict[str, Any]] = [
        {"tags": ["read-only"]},
        {"toolkit": "files"},
        {"include_deferred": False},
        {"include_denied": True, "tags": ["destructive"]},
        {},
    ]
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    expected = []
    for ask in asks:
        for query in queries:
            for k in (1, 50):
                with Catalog(db, policy=Policy(deny=["tag:destructive", "sqlite.*"])) as fresh:
                    hits = fresh.search(query, mode="bm25", k=k, **ask).hits
                    expected += [[[h.tool.id, h.score, h.match] for h in hits]] * 2
    fallback = last_json_line(SCOPED_FALLBACK.format(db=str(db), asks=asks, queries=queries))
    assert fallback["backend"] == "postings"
    assert fallback["ranked"] == expected
    assert [] in expected and any(len(hits) > 3 for hits in expected)


def test_the_index_adds_no_catalog_sized_work_to_garbage_collection(catalog: Catalog) -> None:
    """Counted: a collection of the oldest generation visits every reference each tracked
    container holds, and a serving process collects it now and then (35-45 ms at 100k
    tools on the project's machine). The index's containers the size of the catalog hold
    no reference the collector follows: dicts and tuples of strings and numbers (untracked)
    and arrays (one visit, their type), whether built or loaded from the saved file."""
    kits, _ = bench_toolkits()
    catalog.register(kits)
    built_here = LexicalIndex()
    loaded = LexicalIndex()
    weights = tuple(bm25.DEFAULT_WEIGHTS)
    for index in (built_here, loaded):  # the first builds and saves, the second loads
        with catalog._snapshot() as conn:
            assert index._load_or_build_saved(conn, catalog.revision, weights, str(catalog.path))
    assert isinstance(built_here.index, TantivyIndex) and isinstance(loaded.index, TantivyIndex)
    assert loaded.index.n_docs == built_here.index.n_docs >= 1000
    gc.collect()  # tuples of strings are untracked by their first collection
    for index in (built_here.index, loaded.index):
        visits = {
            name: len(gc.get_referents(value))
            for name, value in vars(index).items()
            if gc.is_tracked(value)
        }
        assert max(visits.values()) < 50, visits


def test_engines_sharing_one_index_start_one_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's pooled readers share one index (``Catalog.share_indexes``) and may all ask
    for its build at once: one background build starts, not one per reader."""
    import threading
    import time

    builds: list[str] = []

    def slow_build(self: LexicalIndex, path: str, weights: tuple[float, ...]) -> None:
        builds.append(path)
        time.sleep(0.5)

    monkeypatch.setattr(LexicalIndex, "_build_from_file", slow_build)
    # the check and the start a little apart, as a busy machine may have them
    original = threading.Thread.start

    def late_start(thread: threading.Thread) -> None:
        time.sleep(0.02)
        original(thread)

    monkeypatch.setattr(threading.Thread, "start", late_start)
    shared = LexicalIndex()
    gate = threading.Barrier(8)

    def ask() -> None:
        gate.wait(5)
        shared.build_soon(None, 1, bm25.DEFAULT_WEIGHTS, str(tmp_path / "c.db"))  # type: ignore[arg-type]

    askers = [threading.Thread(target=ask) for _ in range(8)]
    for asker in askers:
        original(asker)
    for asker in askers:
        asker.join(5)
    shared.wait(5)
    assert len(builds) == 1


def test_tools_kept_unpacked_score_as_freshly_unpacked_ones(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rescored tools are kept unpacked (``DECODED_CACHE``): rankings, scores and fusion's
    documents are the same, bit for bit, whether a tool was unpacked just now, kept from an
    earlier query, or forgotten when the cache filled; a filtered scan keeps nothing."""
    from toolcat.search import lexical_index

    kits, queries = bench_toolkits(600)
    catalog.register(kits)
    index = built(catalog)
    asked = [t for t in (index.terms(q, bm25.MAX_QUERY_TERMS) for q in queries[:150]) if t]

    def answers() -> list[Any]:
        found = []
        for terms in asked:
            for k in (1, 10):
                ranked = index.rank(terms, k)
                found.append((ranked, index.documents([i for i, _ in ranked], terms)))
        return found

    cold = []
    for terms in asked:  # every tool unpacked afresh
        for k in (1, 10):
            index._decoded.clear()
            ranked = index.rank(terms, k)
            found = index.documents([i for i, _ in ranked], terms)
            cold.append((ranked, found))
    assert answers() == cold  # kept from the queries before
    assert len(index._decoded) > 100
    monkeypatch.setattr(lexical_index, "DECODED_CACHE", 7)
    index._decoded.clear()
    assert answers() == cold  # forgotten again and again
    assert len(index._decoded) == 7
    # the oldest one at a time, never all at once (freeing thousands at once took ~5 ms
    # of one query at 100k tools)
    newest = list(index._decoded)
    fresh = next(doc for doc in index._tools if doc not in index._decoded)
    index._score(fresh, [0])
    assert list(index._decoded) == [*newest[1:], fresh]
    index._decoded.clear()
    allowed = frozenset(list(index._tools)[:200])
    scanned = index._scan(asked[0], 10, allowed)
    assert scanned and not index._decoded
    assert all(score > 0 for _, score in scanned)


def test_a_saved_tool_that_repeats_a_term_scores_its_first_count(catalog: Catalog) -> None:
    """A forged save could repeat a term id in one tool: the first count is the one scored
    (as before tools were kept unpacked), not whichever comes last."""
    catalog.register(SAMPLE_TOOLKITS)
    index = built(catalog)
    doc, term_id = next(iter(index._tools)), 0
    index._tools[doc] = array("I", [9, term_id, term_id, 3, 5]).tobytes()
    index._decoded.clear()
    norm, held = index._decode(doc)
    assert held == {term_id: 3}
    assert index.contribution(doc, index._terms[term_id]) == pytest.approx(
        index._idf[term_id] * 3 / (3 + norm)
    )


def test_a_saved_count_that_is_not_a_count_scores_nothing(catalog: Catalog) -> None:
    """A forged save of counts in doubles (column weights that are not multiples): a count
    of exactly -norm divided by 0 in every search that reached its tool; a negative, NaN
    or infinite count now adds nothing."""
    kits, _ = bench_toolkits(300)
    catalog.register(kits)
    index = TantivyIndex()
    with catalog._snapshot() as conn:
        index.build(conn, catalog.revision, (4.0, 2.0, 1.3, 0.5, 0.7))
    assert index._counts == "d"
    doc = next(iter(index._tools))
    norm, held = index._decode(doc, keep=False)
    ids = list(held)
    length = struct.unpack_from("I", index._tools[doc])[0]
    for forged in (-norm, -1.0, math.nan, math.inf):
        index._tools[doc] = (
            struct.pack("I", length)
            + array("I", ids).tobytes()
            + array("d", [forged] * len(ids)).tobytes()
        )
        index._decoded.clear()
        assert index._score(doc, ids) == 0.0
        terms = [index._terms[ids[0]]]
        assert all(score >= 0 for _, score in index.rank(terms, 5))


def test_readers_racing_to_forget_keep_the_unpacked_tools_bounded(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile (other callers): a server's readers share the index. Two that find the kept
    tools full both take out the oldest: one of them misses it (another reader took it and
    kept its own) and both keep theirs. Each such miss must not leave the cache one past
    ``DECODED_CACHE`` for good (a long-lived server would grow without bound)."""
    from toolcat.search import lexical_index

    catalog.register(SAMPLE_TOOLKITS)
    index = built(catalog)
    monkeypatch.setattr(lexical_index, "DECODED_CACHE", 4)

    class Raced(dict[int, Any]):
        raced = 0

        def __delitem__(self, key: int) -> None:
            self.raced += 1
            super().__delitem__(key)
            if self.raced % 2:  # every other time another reader was there first
                super().__setitem__(-self.raced, (1.0, {}))  # and kept a tool of its own
                raise KeyError(key)

    index._decoded = Raced()
    for doc in list(index._tools) * 3:
        index._decode(doc)
    assert index._decoded.raced > 10
    assert len(index._decoded) <= 4
