"""The choice between scanning a filter's tools and the native stage's mask (attack45): it
counts the allowed tools likely to hold a query term, not every allowed tool as scored."""

from __future__ import annotations

import pytest

from tests.search.test_lexical_index import built
from tests.search.test_native import impacts
from tests.search.test_postings import bench_toolkits
from toolcat import Catalog

pytest.importorskip("tantivy")


def test_rare_terms_under_a_filter_take_the_mask(catalog: Catalog) -> None:
    """25 allowed tools and a term few tools hold: a scan passes over all 25 (0.05-0.12 ms
    at 100k tools), the stage over a handful of postings (0.004 ms); costed as if all 25
    were scored, the scan was taken. Either way, every allowed tool scored."""
    kits, _ = bench_toolkits(1500)
    catalog.register(kits)
    index = built(catalog)
    impacts(index)
    by_df = sorted(range(len(index._df)), key=index._df.__getitem__)
    rare = [index._terms[t] for t in by_df if index._df[t] >= 2][:3]
    common = [index._terms[t] for t in by_df[-3:]]
    allowed = frozenset(list(index._tools)[:25])
    assert not index.scans(rare, allowed, 10)
    for terms in (rare, common):
        for k in (1, 10, 50):
            assert index.rank(terms, k, allowed) == index._scan(terms, k, allowed)
    assert allowed in index._masks  # the rare terms' mask
