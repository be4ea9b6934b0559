"""BM25's first stage in C (search/native.py): the same answers as scoring every matching
tool exactly, bit for bit, on every kind of index (built, brought forward, weights that are
not multiples), whatever the packed tools hold; built once, off the asking thread, and only
for a process that searches a revision more than once."""

from __future__ import annotations

import random
import struct
import threading
from array import array
from typing import Any

import pytest

from tests.search.test_lexical_forward import changes, forward
from tests.search.test_lexical_index import FILTERS, built, tagged_toolkits
from tests.search.test_postings import bench_toolkits, exact_fts5
from toolcat import Catalog
from toolcat.search import bm25, native
from toolcat.search.lexical_index import K1, B, TantivyIndex
from toolcat.store import reader

pytest.importorskip("tantivy")


def test_the_extension_is_built_here() -> None:
    """CI machines have a C compiler: the first stage must be there (``setup.py`` builds it
    optionally, so a machine without one still installs toolcat)."""
    assert native.module() is not None
    assert native.available()


def impacts(index: TantivyIndex) -> Any:
    got = index.wait_native(60)
    assert got is not None, index._impacts.error
    return got


def every_tool_scored(index: TantivyIndex, terms: list[str], k: int) -> list[tuple[int, float]]:
    """The exact top k by brute force: every tool holding a term, scored as ``rank`` does."""
    return index._scan(terms, k, frozenset(index._tools))


def queries_of(queries: list[str], seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    shorter = [" ".join(rng.sample(q.split(), min(3, len(q.split())))) for q in queries[:40]]
    return [*queries, *shorter, "file", "the a of", "zzzz qqqq", "get get get weather"]


def answers(index: TantivyIndex, queries: list[str]) -> list[list[tuple[int, float]]]:
    out = []
    for query in queries:
        terms = index.terms(query, bm25.MAX_QUERY_TERMS)
        for k in (1, 10, 50):
            out.append(index.rank(terms, k) if terms else [])
    return out


@pytest.mark.slow
def test_rankings_are_every_tool_scored_bit_for_bit(catalog: Catalog) -> None:
    kits, queries = bench_toolkits()
    catalog.register(kits)
    index = built(catalog)
    impacts(index)
    checked = 0
    for query in queries_of(queries):
        terms = index.terms(query, bm25.MAX_QUERY_TERMS)
        if not terms:
            continue
        for k in (1, 10, 50):
            assert index.rank(terms, k) == every_tool_scored(index, terms, k), (query, k)
            checked += 1
        expected = exact_fts5(catalog, query, 10)
        got = index.rank(terms, 10)
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-6)
    assert checked > 500
    assert index.rounds[0] == 0 and index.rounds[1] > 0


def test_the_same_answers_as_tantivys_first_stage(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    kits, queries = bench_toolkits(1200)
    catalog.register(kits)
    index = built(catalog)
    monkeypatch.setattr(native, "ENABLED", False)
    by_tantivy = answers(index, queries_of(queries))
    assert index._impacts.index is None  # never built while switched off
    monkeypatch.setattr(native, "ENABLED", True)
    impacts(index)
    assert answers(index, queries_of(queries)) == by_tantivy


def test_an_index_brought_forward_answers_as_a_new_build(catalog: Catalog) -> None:
    """The native stage is built from the rows as they are: the rows tantivy holds stale
    and the rows it does not hold need nothing apart."""
    kits, queries = tagged_toolkits(1500)
    catalog.register(kits)
    queries = queries_of([*queries[:40], "zygomorphic petal", "weather file report"])
    index = built(catalog)
    for step, change in enumerate(changes(kits)):
        change(catalog)
        index = forward(catalog, index)
        impacts(index)
        fresh = built(catalog)
        assert answers(index, queries) == answers(fresh, queries), step
    assert index._stale and index._delta_rows


def test_weights_that_are_not_multiples_are_ranked_exactly(catalog: Catalog) -> None:
    """Where tantivy's scores bound nothing (a fixed depth, best effort), the native bounds
    still hold: the answer is certified."""
    kits, queries = bench_toolkits(600)
    catalog.register(kits)
    index = TantivyIndex()
    with catalog._snapshot() as conn:
        index.build(conn, catalog.revision, (4.0, 2.0, 1.3, 0.5, 0.7))
    assert not index.bounded
    impacts(index)
    for query in queries[:80]:
        terms = index.terms(query, bm25.MAX_QUERY_TERMS)
        if terms:
            assert index.rank(terms, 10) == every_tool_scored(index, terms, 10), query
    assert index.rounds[0] == 0


def test_built_only_for_a_revision_searched_more_than_once(catalog: Catalog) -> None:
    kits, queries = bench_toolkits(300)
    catalog.register(kits)
    index = built(catalog)
    terms = index.terms(queries[0], bm25.MAX_QUERY_TERMS)
    for _ in range(native.BUILD_AFTER - 1):
        index.rank(terms, 5)
    assert not index._impacts._started  # a one-shot search never pays for it
    first = index.rank(terms, 5)  # by tantivy, and the build starts
    assert index._impacts._started
    impacts(index)
    assert index.rank(terms, 5) == first


def cost_rule(
    monkeypatch: pytest.MonkeyPatch, scored: int, passed: int, own: int, native_scored: int
) -> None:
    """The filter rule's costs, in postings: a tool scanned and scored, one passed over, the
    native stage's own work, a tool it scores."""
    from toolcat.search import lexical_index

    monkeypatch.setattr(lexical_index, "SCAN_POSTINGS", scored)
    monkeypatch.setattr(lexical_index, "SCAN_PASS_POSTINGS", passed)
    monkeypatch.setattr(lexical_index, "NATIVE_OWN_POSTINGS", own)
    monkeypatch.setattr(lexical_index, "NATIVE_SCORE_POSTINGS", native_scored)


def test_filtered_rankings_are_every_allowed_tool_scored(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter's allowed tools are a mask of the native stage (kept per filter), or, when
    they are few, scored one by one: either way every allowed tool scored, bit for bit."""
    cost_rule(
        monkeypatch, scored=10, passed=0, own=0, native_scored=10
    )  # both ways taken at 1.5k tools
    kits, queries = tagged_toolkits(1500)
    catalog.register(kits)
    index = built(catalog)
    impacts(index)
    with catalog._snapshot() as conn:
        allowed_sets = [reader.allowed_ids(conn, f) for f in FILTERS]
    every = list(index._tools)
    allowed_sets += [frozenset(every[::2]), frozenset(every[5::7]), frozenset(every[:150])]
    masked: set[frozenset[int]] = set()
    scanned = 0
    for allowed in allowed_sets:
        for query in queries_of(queries[:30]):
            terms = index.terms(query, bm25.MAX_QUERY_TERMS)
            if terms and allowed and not index.scans(terms, allowed):
                masked.add(allowed)
            scanned += bool(terms and allowed and index.scans(terms, allowed))
            for k in (1, 10, 50):
                got = index.rank(terms, k, allowed) if terms else []
                assert got == (index._scan(terms, k, allowed) if terms else []), (query, k)
    assert scanned and masked  # both ways taken
    assert len(index._masks) == len(masked)


def test_a_filter_is_scanned_when_its_tools_cost_less_than_the_postings(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scored one by one while that costs less than the native stage over the query's
    postings (``TantivyIndex.scans``); else the stage's mask: the choice follows the terms,
    not a fixed number of tools (100 tools cost 0.79 ms scanned at 100k, 0.31 ms masked)."""
    from toolcat.search import lexical_index

    cost_rule(
        monkeypatch, scored=50, passed=10, own=1000, native_scored=5
    )  # (1.5k tools: few postings)
    kits, _ = bench_toolkits(1500)
    catalog.register(kits)
    index = built(catalog)
    impacts(index)
    common = max(range(len(index._df)), key=index._df.__getitem__)
    terms = [index._terms[common]]
    postings = index._df[common]
    every = list(index._tools)
    # n tools scanned cost n * (10 + 50 * share); masked, the postings, the stage's own
    # work and the k + 16 tools it rescores, in C (share: tools holding the term)
    share = postings / index.n_docs
    masked = 1000 + index.n_docs // lexical_index.NATIVE_TOOLS_A_POSTING + postings
    most_scanned = next(
        n
        for n in range(1, len(every))
        if (n + 1) * (10 + 50 * share) >= masked + min((n + 1) * share, 26) * 5
    )
    below, at = frozenset(every[:most_scanned]), frozenset(every[: most_scanned + 1])
    assert below and index.scans(terms, below) and not index.scans(terms, at)
    assert index.rank(terms, 10, below) == index._scan(terms, 10, below)
    assert not index._masks  # scanned: no mask made
    assert index.rank(terms, 10, at) == index._scan(terms, 10, at)
    assert len(index._masks) == 1


def test_a_mask_is_the_tools_of_its_rows_and_only_this_indexs() -> None:
    tools = {row: pack(3, [(0, 1 + row % 4)]) for row in (50, 7, 900, 3, 12)}
    index = make(tools, [1.0])
    every = {row for _, row in index.top([0], 10)}
    assert every == set(tools)
    mask = index.mask([7, 900, 4, -1, 2**70, 10**30])  # rows it does not hold: passed over
    assert {row for _, row in index.top([0], 10, mask)} == {7, 900}
    assert index.top([0], 10, index.mask([])) == []
    with pytest.raises(ValueError, match="this index's own"):
        index.top([0], 10, mask + b"\0")
    with pytest.raises(ValueError, match="this index's own"):
        index.top([0], 10, bytearray(mask))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        index.mask(["7"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        index.mask(7)  # type: ignore[arg-type]


def test_concurrent_queries_share_one_index(catalog: Catalog) -> None:
    """Queries on several threads at once (the GIL let go while summing) each get their own
    sums: the same answers as one at a time."""
    kits, queries = bench_toolkits(1000)
    catalog.register(kits)
    index = built(catalog)
    impacts(index)
    terms = [t for t in (index.terms(q, bm25.MAX_QUERY_TERMS) for q in queries) if t]
    alone = [index.rank(t, 10) for t in terms]
    got: dict[int, list[list[tuple[int, float]]]] = {}

    def run(worker: int) -> None:
        got[worker] = [index.rank(t, 10) for t in terms[worker:] + terms[:worker]]

    threads = [threading.Thread(target=run, args=(w,)) for w in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for worker, found in got.items():
        assert found == alone[worker:] + alone[:worker]


# -- the packed tools are input (a saved index on disk) -------------------------------------


def pack(length: int, pairs: list[tuple[int, float]], typecode: str = "I") -> bytes:
    return (
        struct.pack("I", length)
        + array("I", [t for t, _ in pairs]).tobytes()
        + array(typecode, [c for _, c in pairs]).tobytes()
    )


def make(tools: dict[int, bytes], idf: list[float], typecode: str = "I") -> Any:
    compiled = native.module()
    assert compiled is not None
    return compiled.Index(tools, typecode, array("d", idf), 2.0, K1, B, 10.0)


def test_term_ids_out_of_the_vocabulary_and_repeats_are_read_as_decode_reads_them() -> None:
    tools = {
        7: pack(10, [(0, 2), (9, 5), (4_000_000_000, 1), (0, 40)]),  # unknown ids, 0 twice
        3: pack(4, [(1, 1)]) + b"\x01\x02\x03",  # bytes past the counts: ignored
    }
    index = make(tools, [2.0, 1.0])
    assert index.bounded and index.postings == 2
    assert [row for _, row in index.top([0], 5)] == [7]
    bound = index.top([0], 5)[0][0]
    exact = 2.0 * 2 / (2 + 2.0 * K1 * (1 - B + B * 10 / 10.0))  # its first count, 2
    assert exact <= bound <= exact * 1.001
    assert index.top([1, 1], 5)[0][0] >= 2 * index.top([1], 5)[0][0] * 0.999  # asked twice
    assert index.top([-1, 99, 2**40], 5) == []
    assert index.top([0], 0) == [] and len(index.top([0, 1], 10**9)) == 2


def test_forged_blobs_fail_or_leave_the_index_unused() -> None:
    with pytest.raises(ValueError, match="shorter than its length"):
        make({1: b"\x01"}, [1.0])
    with pytest.raises(TypeError, match="bytes"):
        make({1: "text"}, [1.0])  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="'I' or 'd'"):
        make({1: pack(1, [(0, 1)])}, [1.0], typecode="q")
    nan = make({1: pack(3, [(0, float("nan"))], "d")}, [1.0], "d")
    assert not nan.bounded
    assert not make({1: pack(3, [(0, 1.0)], "d")}, [float("inf")], "d").bounded
    # A negative contribution is bounded by 0; a count past -norm makes one above the IDF.
    negative = make({1: pack(3, [(0, -0.5)], "d"), 2: pack(3, [(0, 1.0)], "d")}, [1.0], "d")
    assert negative.bounded and [row for _, row in negative.top([0], 2)] == [2, 1]
    assert not make({1: pack(3, [(0, -5.0)], "d")}, [1.0], "d").bounded
    with pytest.raises(ValueError, match="65536"):
        make({1: pack(1, [(0, 1)])}, [1.0]).top([0] * 65537, 1)


def test_a_forged_index_is_answered_by_tantivy(catalog: Catalog) -> None:
    kits, queries = bench_toolkits(300)
    catalog.register(kits)
    index = built(catalog)
    terms = index.terms(queries[0], bm25.MAX_QUERY_TERMS)
    before = index.rank(terms, 5)
    asked = set(index._ids(terms))
    row = next(r for r in index._tools if asked.isdisjoint(index._decode(r, keep=False)[1]))
    index._tools[row] = b"\x00"  # shorter than a length (a tool no query term finds)
    assert index.wait_native(60) is None
    assert "shorter" in index._impacts.error
    assert index.rank(terms, 5) == before  # tantivy answers on


def test_tools_far_apart_are_found_past_the_16_bit_gaps() -> None:
    """A term's tools are stored as 16-bit gaps, a gap of 65,535 or more escaped: every
    tool of a term spread over 200k tools is found, with its own bound."""
    holders = [0, 1, 65_534, 65_535 + 65_534, 65_535 * 2 + 65_535, 150_000, 199_999]
    tools = {
        row: pack(3 + row % 5, [(1, 1 + row % 3), *([(0, 2)] if i in holders else [])])
        for i, row in enumerate(range(10_000_000, 10_200_000))
    }
    index = make(tools, [3.0, 0.5])
    assert index.postings == 200_000 + len(holders)
    found = index.top([0], 100)
    assert sorted(row - 10_000_000 for _, row in found) == sorted(holders)
    norm = 2.0 * K1 * (1 - B + B * 3 / 10.0)  # the tools whose length is 3 (row % 5 == 0)
    assert found[0][0] >= 3.0 * 2 / (2 + norm)
    every = index.top([1, 0], 200_000)
    assert len(every) == 200_000 and len({row for _, row in every}) == 200_000
    assert {row - 10_000_000 for _, row in every[: len(holders)]} == set(holders)


def test_switched_off_once_built_tantivy_answers(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``native.ENABLED`` off takes a built stage out too (attack43 saw it kept)."""
    kits, queries = bench_toolkits(300)
    catalog.register(kits)
    index = built(catalog)
    impacts(index)
    terms = index.terms(queries[0], bm25.MAX_QUERY_TERMS)
    by_native = index.rank(terms, 10)
    monkeypatch.setattr(native, "ENABLED", False)

    def refused(*args: Any) -> None:
        raise AssertionError("the native stage answered while switched off")

    monkeypatch.setattr(TantivyIndex, "_rank_by_impacts", refused)
    assert index.rank(terms, 10) == by_native


# -- exact scores in C, and the common terms spared -----------------------------------------


class Recorded:
    """The native stage, its ``best`` calls recorded as (depth, most, spare_above, rounds)."""

    def __init__(self, stage: Any) -> None:
        self.stage, self.asked = stage, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stage, name)

    def best(self, term_ids: Any, k: int, depth: int, most: int, *rest: Any) -> Any:
        found = self.stage.best(term_ids, k, depth, most, *rest)
        self.asked.append((depth, most, rest[1] if len(rest) > 1 else -1, found[1]))
        return found


def spare_everywhere(monkeypatch: pytest.MonkeyPatch, share: float = 0.02) -> None:
    """The native stage spares common terms at any catalog size (``SPARE_FROM`` is 50k)."""
    from toolcat.search import lexical_index

    monkeypatch.setattr(lexical_index, "SPARE_FROM", 0)
    monkeypatch.setattr(lexical_index, "SPARE_SHARE", share)
    monkeypatch.setattr(lexical_index, "SPARE_WHEN", 0.0)
    monkeypatch.setattr(lexical_index, "SPARED_IDF_MOST", float("inf"))  # whatever the IDFs


def test_sparing_common_terms_answers_every_tool_scored_bit_for_bit(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Candidates from the rarer terms alone, certified against the spared terms' largest
    impacts or asked again with every term: the same answers, bit for bit, both ways taken
    (and with a filter's mask)."""
    spare_everywhere(monkeypatch)
    kits, queries = tagged_toolkits(1500)
    catalog.register(kits)
    index = built(catalog)
    impacts(index)
    with catalog._snapshot() as conn:
        allowed = reader.allowed_ids(conn, FILTERS[0])
    for query in queries_of(queries[:60]):
        terms = index.terms(query, bm25.MAX_QUERY_TERMS)
        if not terms:
            continue
        for k in (1, 10, 50):
            assert index.rank(terms, k) == every_tool_scored(index, terms, k), (query, k)
            assert index.rank(terms, k, allowed) == index._scan(terms, k, allowed), (query, k)
    assert index.spared[True] > 50 and index.spared[False] > 5  # certified, asked again
    assert index.rounds[0] == 0


def test_common_terms_spared_take_one_pass_then_every_term(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spared ask is one pass over the postings (``SPARED_CANDIDATES`` candidates at
    once: a second spared pass raised the p99 at 1M), and one not certified is asked
    again with every term, never spared twice."""
    from toolcat.search import lexical_index

    spare_everywhere(monkeypatch)
    kits, queries = tagged_toolkits(1500)
    catalog.register(kits)
    index = built(catalog)
    recorded = Recorded(impacts(index))
    asked = recorded.asked
    monkeypatch.setattr(index._impacts, "index", recorded)
    for query in queries_of(queries[:60]):
        terms = index.terms(query, bm25.MAX_QUERY_TERMS)
        if terms:
            asked.clear()
            assert index.rank(terms, 10) == every_tool_scored(index, terms, 10), query
            spared = [a for a in asked if a[2] >= 0]
            assert len(spared) <= 1
            if spared:
                depth, most, _, rounds = spared[0]
                assert depth == most == lexical_index.SPARED_CANDIDATES
                assert rounds in (0, 1)
                if rounds:  # certified: answered
                    assert len(asked) == 1
                else:  # asked again, every term in the bounds
                    assert len(asked) == 2 and asked[1][2] == -1
    assert index.spared[True] > 20 and index.spared[False] > 2  # certified, asked again


def test_a_query_whose_only_common_term_is_its_rarest_is_not_spared(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``best`` always keeps the rarest held term: a query whose common terms are that one
    alone (asked once or twice) has nothing to spare, and gets no spared pass of
    ``SPARED_CANDIDATES`` for nothing; with a commoner term beside it, it has."""
    spare_everywhere(monkeypatch)
    kits, _ = tagged_toolkits(1500)
    catalog.register(kits)
    index = built(catalog)
    df = index._df
    above = int(index.n_docs * 0.02)  # ``spare_everywhere``'s share
    common = sorted((i for i in range(len(df)) if df[i] > above), key=df.__getitem__)
    assert len(common) >= 2 and df[common[0]] < df[common[-1]]
    for ids in ([common[0]], [common[0], common[0]], [-1, common[0]]):
        assert index._spare_above(ids, 10) == -1, ids
    assert index._spare_above([common[0], common[-1]], 10) == above
    assert index.rank([index._terms[common[0]]], 10) == every_tool_scored(
        index, [index._terms[common[0]]], 10
    )


def test_a_tool_of_common_terms_alone_above_the_candidates_is_not_missed() -> None:
    """The rare term's one tool scores below tools holding only the common term: from the
    rare term's candidates alone the answer would miss them. Their bound (the common term's
    largest impact) beats the k-th score found, so the answer is not certified (rounds 0),
    and asked with every term it is theirs."""
    tools = {row: pack(4, [(1, 3)]) for row in range(1, 40)}  # the common term, 3 times
    tools[100] = pack(40, [(0, 1), (2, 1)])  # the rare term once, in a long tool
    index = make(tools, [1.5, 1.0, 0.2])
    spared = index.best([0, 1], 5, 21, 512, 1e-4, 10)
    assert spared[1] == 0 and [row for row, _ in spared[0]] == [100]
    found, rounds, _ = index.best([0, 1], 5, 21, 4096, 1e-4, -1)
    assert rounds > 0 and [row for row, _ in found] == [1, 2, 3, 4, 5]  # tied: by row id
    # every held term spared but the rarest, whatever the share: here the third term's
    found, rounds, scored = index.best([1, 2], 3, 19, 512, 1e-4, 0)
    assert [row for row, _ in found] == [100] and rounds == 0 and scored == 1


def test_exact_scores_are_decodes_bit_for_bit_on_forged_counts() -> None:
    """Scored in C as ``_decode`` and ``_score`` read a tool: a term repeated counts its
    first count, a negative count counts 0, an unknown id nothing, a term asked twice adds
    twice, in the query's order (a count that is not a finite number leaves the index
    unbounded, never used: ``test_forged_blobs_fail_or_leave_the_index_unused``)."""
    norm = 2.0 * K1 * (1 - B + B * 6 / 10.0)

    def part(idf: float, f: float) -> float:
        return idf * f / (f + norm)

    tools = {
        1: pack(6, [(0, 2.5), (1, -0.5), (0, 9.0), (7, 1.0), (2, 0.3)], "d"),
        2: pack(6, [(1, 1.0), (2, 0.0)], "d"),
    }
    index = make(tools, [2.0, 1.0, 0.5], "d")
    assert index.bounded
    found, rounds, _ = index.best([0, 1, 2, 0, -1], 2, 2, 2, 0.0)
    scores = dict(found)
    assert scores[1] == 0.0 + part(2.0, 2.5) + part(1.0, 0.0) + part(0.5, 0.3) + part(2.0, 2.5)
    assert scores[2] == 0.0 + part(1.0, 1.0) + part(0.5, 0.0)
    assert rounds == 1


def test_best_refuses_what_it_cannot_answer() -> None:
    index = make({1: pack(3, [(0, 1)]), 2: pack(3, [(0, 2)])}, [1.0])
    for slack in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="slack"):
            index.best([0], 1, 1, 1, slack)
    with pytest.raises(ValueError, match="own"):
        index.best([0], 1, 1, 1, 0.0, -1, b"\0")
    with pytest.raises(ValueError, match="65536"):
        index.best([0] * 65537, 1, 1, 1, 0.0)
    with pytest.raises(TypeError):
        index.best(["a"], 1, 1, 1, 0.0)
    assert index.best([0], 0, 1, 1, 0.0) == ([], 1, 0)
    assert index.best([-1, 5, 2**40], 3, 1, 1, 0.0) == ([], 1, 0)
    # depth and most past the tools, below k: bounded by them
    assert [row for row, _ in index.best([0], 10**9, -5, -5, 0.0)[0]] == [2, 1]
    assert index.best([0], 1, 1, 1, 0.0, -1, index.mask([1]))[0][0][0] == 1
    assert make({}, [1.0]).best([0], 3, 3, 3, 0.0) == ([], 1, 0)


def test_the_terms_each_hit_holds_are_read_as_decode_reads_them(catalog: Catalog) -> None:
    """fusion's signals read which query terms each hit holds: from the native stage when
    built, the same sets as unpacking each tool in Python; a row it does not hold is None."""
    kits, queries = bench_toolkits(600)
    catalog.register(kits)
    index = built(catalog)
    found = impacts(index)
    rows = list(index._tools)
    for query in queries[:40]:
        terms = [*index.terms(query, bm25.MAX_QUERY_TERMS), "zzz-no-such-term"]
        ids = [row for row, _ in index.rank(terms[:-1], 10)] + rows[:5] + [-3, 2**62, 10**30]
        native_sets = index.documents(ids, terms)
        index._impacts.index = None
        python_sets = index.documents(ids, terms)
        index._impacts.index = found
        assert native_sets == python_sets, query
    held = found.held([index._ids(["zzz"])[0], -1], [rows[0], 10**30], ["a", "b"])
    assert held == [set(), None]
    with pytest.raises(ValueError, match="label"):
        found.held([0, 1], [rows[0]], ["only one"])
