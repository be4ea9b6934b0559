"""Attacks on BM25's native first stage (search/native.py, _impacts.c): each test failed on
the code before its fix."""

from __future__ import annotations

import gc
import random
import weakref
from typing import Any

import pytest

from tests.search.test_lexical_index import built
from tests.search.test_native import impacts
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import native
from toolcat.search.lexical_index import EXTRA_CANDIDATES, TantivyIndex

pytest.importorskip("tantivy")
pytestmark = pytest.mark.skipif(native.module() is None, reason="_impacts not compiled")

WORDS = [f"zq{a}{b}" for a in "bcdfghjklmnpqrtvwxz" for b in "bcdfghjklmnpqrtvwxz"][:300]


def common_word_kits(n: int = 1200, seed: int = 4) -> list[Toolkit]:
    """Every tool says "python" (an IDF floored at 1e-6: held by more than half the tools);
    the rest is words of a few tools each, of varied lengths."""
    rng = random.Random(seed)
    tools = [
        Tool(
            name=f"tool{i}",
            description="python " + " ".join(rng.choices(WORDS, k=rng.randrange(2, 30))),
        )
        for i in range(n)
    ]
    return [
        Toolkit(name=f"kit{i}", version="1", tools=tools[i : i + 100]) for i in range(0, n, 100)
    ]


class Scorings:
    """The exact scorings from ``reset`` on: ``_score`` calls (Python) and the tools the
    native stage scored (``TantivyIndex.scored``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, index: TantivyIndex) -> None:
        self.index, self.python, self.native = index, 0, index.scored
        score = TantivyIndex._score

        def counting(owner: TantivyIndex, doc: int, ids: Any, keep: bool = True) -> float:
            self.python += 1
            return score(owner, doc, ids, keep)

        monkeypatch.setattr(TantivyIndex, "_score", counting)

    def reset(self) -> None:
        self.python, self.native = 0, self.index.scored

    def count(self) -> int:
        return self.python + self.index.scored - self.native


def test_a_dropped_index_is_freed_without_a_cyclic_collection(catalog: Catalog) -> None:
    """A revision's index (at 1M tools ~1 GB with its packed tools and postings) is freed
    when the last reference to it goes, as before the native stage: its ``Impacts`` must not
    hold it in a cycle (the source closure did), which only a full collection frees, so a
    server changing revisions kept several old indexes at once (7 of 15 in a loop)."""
    catalog.register(common_word_kits(200))
    was = gc.isenabled()
    gc.disable()
    try:
        index = built(catalog)
        ref = weakref.ref(index)
        del index
        assert ref() is None
        index = built(catalog)
        impacts(index)  # built and served: the same
        index.rank(["python"], 5)
        ref = weakref.ref(index)
        del index
        assert ref() is None
    finally:
        if was:
            gc.enable()


def test_a_term_most_tools_hold_is_certified_in_one_round(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query of a term held by more than half the tools (FTS5's IDF floored at 1e-6, and
    ``useful_terms`` keeps it when the query has no rarer one): with one quantum for every
    term (the largest IDF / 65535) each tool's contribution rounded up to that one quantum,
    every tool tied in its bound and each of 7 rounds rescored them all (2.7 s a query at
    100k tools against tantivy's 2 ms). Each term's own quantum separates them."""
    catalog.register(common_word_kits())
    index = built(catalog)
    found = impacts(index)
    scored = Scorings(monkeypatch, index)
    for query in ("python", "python zqbf", "zqcd python zqdf"):
        terms = query.split()
        assert all(term in index._term_ids for term in terms)
        for k in (1, 10, 50):
            scored.reset()
            index.rounds.clear()
            got = index._rank_by_impacts(found, terms, k, None)
            # the tools tied for the k-th score (as long: ~40 each) and a second round at most
            assert scored.count() < 200 and sum(index.rounds.values()) == 1, (query, k)
            assert max(index.rounds) <= 2, (query, k, index.rounds)
            assert got == index._scan(terms, k, frozenset(index._tools)), (query, k)


def test_tools_tied_in_score_are_scored_once(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tools of the same text but their names tie in score: the certificate cannot hold
    until every one is scored (ties go by row id). Each round scored the rounds before's
    candidates again (657 scorings for 300 tools here, 28,866 for 20,000), and kept them
    all, one eviction from the decoded tools at a time (~8 us each): 180-420 ms at 20,000
    against 92-124 ms now."""
    tools = [Tool(name=f"get_{name}", description=f"Get {name} by its id.") for name in WORDS]
    catalog.register([Toolkit(name="things", version="1", tools=tools)])
    index = built(catalog)
    found = impacts(index)
    scored = Scorings(monkeypatch, index)
    for terms in (["get"], ["get", "id"]):
        for k in (1, 10):
            scored.reset()
            index._decoded.clear()
            got = index._rank_by_impacts(found, terms, k, None)
            assert scored.count() == len(WORDS), (terms, k, scored.count())
            # only the first round's kept: the rest would push out what queries share
            assert len(index._decoded) <= k + EXTRA_CANDIDATES
            assert got == index._scan(terms, k, frozenset(index._tools)), (terms, k)
            assert [row for row, _ in got] == sorted(row for row, _ in got)  # by row id


def test_past_max_candidates_tied_tools_are_answered_best_effort(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(lead) Tools tied with the k-th stop the native stage at ``MAX_CANDIDATES`` tools
    scored, as tantivy's stage stops: uncertified, the best bounds with lower row ids first,
    which for copies of one text is the exact answer."""
    tools = [Tool(name=f"get_{name}", description=f"Get {name} by its id.") for name in WORDS]
    catalog.register([Toolkit(name="things", version="1", tools=tools)])
    index = built(catalog)
    found = impacts(index)
    monkeypatch.setattr("toolcat.search.lexical_index.MAX_CANDIDATES", 100)
    scored = Scorings(monkeypatch, index)
    for k in (1, 10):
        scored.reset()
        index.rounds.clear()
        got = index._rank_by_impacts(found, ["get", "id"], k, None)
        assert scored.count() <= 100 < len(WORDS)  # not every tied tool
        assert index.rounds[0] == 1  # uncertified, and counted so
        assert got == index._scan(["get", "id"], k, frozenset(index._tools))


def test_without_the_extension_a_query_does_not_look_for_it_again(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``_impacts`` was not compiled (a machine without a C compiler), every
    unfiltered query past a revision's 3rd tried to import it again: a failed import
    searches the path each time (~60 us, a tenth of a warm query at 10k tools)."""
    import builtins
    import sys

    catalog.register(common_word_kits(100))
    index = built(catalog)
    import toolcat.search

    monkeypatch.setitem(sys.modules, "toolcat.search._impacts", None)  # not importable
    monkeypatch.delattr(toolcat.search, "_impacts", raising=False)
    monkeypatch.setattr(native, "_compiled", getattr(native, "_UNKNOWN", None), raising=False)
    looked = 0
    real_import = builtins.__import__

    def counting(name: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal looked
        fromlist = args[2] if len(args) > 2 else kwargs.get("fromlist")
        looked += "_impacts" in (fromlist or ()) or name.endswith("_impacts")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", counting)
    for _ in range(20):
        index.rank(["python"], 5)
    assert not native.available() and index._impacts.index is None
    assert looked <= 1, looked
