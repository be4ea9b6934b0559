"""Filtered queries through BM25's native first stage (``_impacts.Index.mask`` / ``top``'s
mask, ``TantivyIndex._mask``), attacked: the masks a revision keeps stay bounded whatever
reader threads left behind, and ``rank`` answers as ``_scan`` at any k."""

from __future__ import annotations

import random

import pytest

from tests.search.test_lexical_index import built
from tests.search.test_per_filter import Compared
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import bm25, lexical_index, native
from toolcat.search.lexical_index import TantivyIndex

pytest.importorskip("tantivy")
if native.module() is None:
    pytest.skip("the native extension is not built", allow_module_level=True)

WORDS = [
    "file",
    "read",
    "write",
    "weather",
    "city",
    "report",
    "flower",
    "petal",
    "search",
    "index",
    "user",
    "data",
]


def _catalog_index(catalog: Catalog, n_tools: int = 400) -> TantivyIndex:
    rng = random.Random(44)
    tools = [
        Tool(name=f"tool_{i}", description=" ".join(rng.choices(WORDS, k=rng.randrange(2, 9))))
        for i in range(n_tools)
    ]
    catalog.register(Toolkit(name="kit", version="1.0.0", tools=tools))
    index = built(catalog)
    assert index.wait_native(60) is not None
    return index


def test_masks_left_over_by_racing_threads_are_trimmed_back_to_the_bound(
    catalog: Catalog,
) -> None:
    """Reader threads share a revision's masks: two that see the dict under the bound both
    add one, and two that evict the same oldest one take out one between them. The dict
    then held more than ``NATIVE_MASKS`` for good (8 threads of filtered queries: 26 after
    16k queries, 28 after 64k): every later insert took out one mask and added one. The
    next insert must bring it back to the bound."""
    index = _catalog_index(catalog)
    rows = sorted(index._tools)
    terms = index.terms("weather city report", bm25.MAX_QUERY_TERMS)
    rng = random.Random(1)
    # The state races leave: more masks than the bound.
    for _ in range(lexical_index.NATIVE_MASKS + 6):
        allowed = frozenset(rng.sample(rows, 150))
        index._masks._by_set[allowed] = index.wait_native().mask(allowed)
    allowed = frozenset(rng.sample(rows, 150))
    assert index.rank(terms, 10, allowed) == index._scan(terms, 10, allowed)
    assert allowed in index._masks
    assert len(index._masks) <= lexical_index.NATIVE_MASKS


@pytest.mark.parametrize("k", [0, -1, -40])
def test_no_hits_asked_is_no_hits_through_every_first_stage(catalog: Catalog, k: int) -> None:
    """``rank`` at k < 1 answers as ``_scan`` (no hits), whichever stage answers: the native
    one and tantivy's read the k-th best of an empty heap (IndexError), or asked tantivy
    for a negative depth (OverflowError)."""
    index = _catalog_index(catalog)
    terms = index.terms("weather city report", bm25.MAX_QUERY_TERMS)
    allowed = frozenset(sorted(index._tools)[:300])
    assert index._scan(terms, k, allowed) == []
    assert index.rank(terms, k) == []  # native
    assert index.rank(terms, k, allowed) == []  # native, through a mask
    native_off = built(catalog)  # tantivy's stage: its native one never built
    assert native_off.rank(terms, k) == []
    assert native_off.rank(terms, k, allowed) == []


def test_another_readers_equal_filter_set_is_not_compared_whole_at_every_query(
    catalog: Catalog,
) -> None:
    """A server's pooled readers share one index (``Catalog.share_indexes``) but each keeps
    its own allowed set of a filter (``SearchEngine._allowed``): equal sets, not the same
    object. The masks were kept by set, so every query of the readers but the first
    compared its set with the kept one, element by element: ~15 ms at 500k allowed rows
    (a native query at 1M tools: ~1.5 ms). Once a set has found its mask, its next
    queries must not compare it again."""
    index = _catalog_index(catalog)
    rows = sorted(index._tools)
    terms = index.terms("weather city report", bm25.MAX_QUERY_TERMS)
    first_reader = frozenset(rows[::2])
    second_reader = Compared(rows[::2])
    assert index.rank(terms, 10, first_reader) == index._scan(terms, 10, first_reader)
    Compared.compared = 0
    for _ in range(20):
        assert index.rank(terms, 10, second_reader) == index._scan(terms, 10, first_reader)
    assert Compared.compared <= 1
    assert len(index._masks) == 1  # one mask for the two readers' sets
