"""Kept BM25 answers and built hit tools (search/kept.py), and ``Catalog.search_kept``: the
answer of a request ranked before, given only when it costs no ranking and no tool read (a
server answers it on its event loop), and always the answer ``search`` gives."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from toolcat import Catalog
from toolcat.search import engine
from toolcat.search.kept import KeptAtRevision

QUERIES = [
    "convert celsius to fahrenheit",
    "read the lines of a text file",
    "count the words in a text",
    "what time is it in another timezone",
    "hash a string",
]


@pytest.fixture
def path(sample_path: Path) -> Path:
    return sample_path


def asked(catalog: Catalog, query: str, **options: object) -> list[tuple[str, float, str]]:
    return [(h.tool.id, h.score, h.match) for h in catalog.search(query, **options).hits]  # type: ignore[arg-type]


def kept(catalog: Catalog, query: str, **options: object) -> list[tuple[str, float, str]] | None:
    found = catalog.search_kept(query, **options)  # type: ignore[arg-type]
    return None if found is None else [(h.tool.id, h.score, h.match) for h in found.hits]


def warmed(catalog: Catalog, query: str, **options: object) -> list[tuple[str, float, str]]:
    """``query`` asked until its answer is kept with the in-memory index loaded."""
    for _ in range(engine.POSTINGS_AFTER):
        answer = asked(catalog, query, **options)
    assert catalog._search.postings.index is not None
    return answer


def test_a_request_ranked_before_is_its_search_answer(path: Path) -> None:
    scopes: list[dict[str, object]] = [
        {"mode": "bm25", "k": 5},
        {"mode": "bm25", "k": 2},
        {"mode": "bm25", "k": 5, "toolkit": "text"},
        {"mode": "bm25", "k": 5, "exclude_tags": ["filesystem"]},
        {"k": 5},  # the best mode: BM25 without vectors
    ]
    with Catalog(path) as catalog:
        for query in QUERIES:
            for options in scopes:
                assert kept(catalog, query, **options) is None  # never asked
        for query in QUERIES:
            for options in scopes:
                expected = warmed(catalog, query, **options)
                assert kept(catalog, query, **options) == expected, (query, options)
                assert kept(catalog, query.upper(), **options) is None  # another request
        with Catalog(path) as fresh:  # what a catalog that kept nothing answers
            for query in QUERIES:
                for options in scopes:
                    assert kept(catalog, query, **options) == asked(fresh, query, **options)


def test_what_is_not_kept_is_neither_ranked_read_nor_built(path: Path) -> None:
    with Catalog(path) as catalog:
        engine_state = catalog._search

        def untouched(query: str, **options: object) -> bool:
            """``search_kept`` gives None and keeps, builds and ranks nothing."""
            before = (len(engine_state.answers), len(engine_state.built))
            rounds = dict(getattr(engine_state.postings.index, "rounds", {}))
            found = kept(catalog, query, **options)
            after = (len(engine_state.answers), len(engine_state.built))
            ranked = dict(getattr(engine_state.postings.index, "rounds", {}))
            return found is None and after == before and ranked == rounds

        catalog.reindex()  # vectors: hybrid and embedding modes
        warmed(catalog, QUERIES[0], mode="bm25")
        answers = len(engine_state.answers)
        for query in QUERIES[1:]:
            assert untouched(query, mode="bm25")
        assert untouched(QUERIES[0], mode="bm25", k=3)  # another k
        for mode in ("hybrid", "embedding", "regex"):
            asked(catalog, QUERIES[0], mode=mode)
            assert untouched(QUERIES[0], mode=mode)
        assert untouched(QUERIES[0])  # the best mode is hybrid now
        assert untouched("   ", mode="bm25")  # list mode
        long = "convert " * 200  # over MAX_CACHED_QUERY_CHARS: never kept
        warmed(catalog, long, mode="bm25")
        assert untouched(long, mode="bm25")
        assert len(engine_state.answers) == answers


def test_no_kept_answer_before_the_index_is_loaded(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer FTS5 ranked is kept, but ``search_kept`` gives none while the in-memory
    index is not loaded: the query that would load (or build) it is a reader's to ask."""
    monkeypatch.setattr(engine, "POSTINGS_AFTER", 10**9)
    with Catalog(path) as catalog:
        for _ in range(3):
            asked(catalog, QUERIES[0], mode="bm25")
        assert len(catalog._search.answers) == 1
        assert kept(catalog, QUERIES[0], mode="bm25") is None
        assert catalog._search.postings.index is None  # nothing started building it


def test_a_hit_tool_no_longer_built_means_no_kept_answer(path: Path) -> None:
    with Catalog(path) as catalog:
        expected = warmed(catalog, QUERIES[1], mode="bm25")
        catalog._search.built.clear()  # the bound reached: its tools forgotten
        assert kept(catalog, QUERIES[1], mode="bm25") is None
        assert asked(catalog, QUERIES[1], mode="bm25") == expected  # built again
        assert kept(catalog, QUERIES[1], mode="bm25") == expected


def test_a_change_from_another_connection_is_seen_at_once(path: Path) -> None:
    with Catalog(path) as catalog, Catalog(path) as admin:
        before = warmed(catalog, QUERIES[0], mode="bm25")
        first = before[0][0].split(".")[0]
        admin.remove(first)
        assert kept(catalog, QUERIES[0], mode="bm25") is None  # another revision
        after = warmed(catalog, QUERIES[0], mode="bm25")
        assert all(not tool.startswith(f"{first}.") for tool, _, _ in after)
        assert kept(catalog, QUERIES[0], mode="bm25") == after


def test_a_principal_gets_its_own_reordering_and_its_hits_are_remembered(path: Path) -> None:
    query = QUERIES[2]
    with Catalog(path) as catalog:
        plain = warmed(catalog, query, mode="bm25", k=6)
        lifted_tool = plain[-1][0]
        assert catalog.record_uses([(query, lifted_tool)], principal="carol") == 1
        assert kept(catalog, query, mode="bm25", k=6) == plain  # the use moves nothing here
        theirs = asked(catalog, query, mode="bm25", k=6, principal="carol")
        assert theirs != plain and [t for t, _, _ in theirs].index(lifted_tool) < 5
        assert kept(catalog, query, mode="bm25", k=6, principal="carol") == theirs
        assert kept(catalog, query, mode="bm25", k=6, principal="dave") == plain
        catalog._recent_hits.clear()
        assert kept(catalog, query, mode="bm25", k=6) is not None
        assert catalog.used(plain[0][0])  # remembered by the kept answer: a use recorded


def test_readers_that_share_indexes_share_kept_answers_until_forgotten(path: Path) -> None:
    with Catalog(path) as server, Catalog(path) as first, Catalog(path) as second:
        first.share_indexes(server)
        second.share_indexes(server)
        expected = warmed(first, QUERIES[3], mode="bm25")
        found = second.search_kept(QUERIES[3], mode="bm25")
        assert found is not None and [(h.tool.id, h.score, h.match) for h in found.hits] == expected
        again = first.search(QUERIES[3], mode="bm25")
        assert [h.tool for h in again.hits] == [h.tool for h in found.hits]
        assert all(a.tool is b.tool for a, b in zip(again.hits, found.hits, strict=True))
        server.forget_kept()  # a copy restored again at the same revision
        third = Catalog(path)
        try:
            third.share_indexes(server)
            assert kept(third, QUERIES[3], mode="bm25") is None
            assert kept(second, QUERIES[3], mode="bm25") == expected  # it keeps the old ones
        finally:
            third.close()


def test_kept_at_revision_is_bounded_and_forgets_an_old_revision() -> None:
    kept: KeptAtRevision[int, str] = KeptAtRevision(3)
    kept.keep(7, {1: "a", 2: "b"})
    kept.keep(7, {3: "c", 4: "d"})
    assert len(kept) == 3 and kept.get(7, 1) is None  # the oldest went first
    assert kept.found(7, [4, 1, 2]) == {4: "d", 2: "b"}
    assert kept.holds(7, [2, 3]) and not kept.holds(7, [1, 2]) and not kept.holds(8, [2])
    assert kept.get(8, 2) is None and kept.found(6, [2]) == {}
    kept.keep(8, {9: "z"})
    assert len(kept) == 1 and kept.get(7, 2) is None and kept.get(8, 9) == "z"
    nothing: KeptAtRevision[int, str] = KeptAtRevision(0)
    nothing.keep(1, {1: "a"})
    assert len(nothing) == 0


def test_kept_at_revision_shared_by_threads_stays_whole() -> None:
    kept: KeptAtRevision[int, int] = KeptAtRevision(64)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(4000):
                revision = (i // 1000) + seed % 2
                kept.keep(revision, {(seed * 7919 + i) % 500: i})
                found = kept.found(revision, range(0, 500, 7))
                assert all(isinstance(v, int) for v in found.values())
                kept.holds(revision, found)
                assert len(kept) <= 64
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(kept) <= 64
