"""The in-memory postings index ranks exactly as FTS5's bm25() and is never served stale."""

from __future__ import annotations

import json
import random

import pytest

from tests.helpers import BENCH, SAMPLE_TOOLKITS
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import bm25
from toolcat.search.engine import POSTINGS_AFTER
from toolcat.search.postings import PostingsIndex
from toolcat.store.reader import Filters


def bench_toolkits(limit: int = 1500) -> tuple[list[Toolkit], list[str]]:
    """Real tool text and queries from ../shared/bench (bfcl), else the sample catalog."""
    source = BENCH / "bfcl"
    if not (source / "tools.jsonl").exists():
        pytest.skip("../shared/bench is not here")
    tools, seen = [], set()
    for line in (source / "tools.jsonl").read_text().splitlines():
        raw = json.loads(line)
        name = "".join(c if c.isalnum() or c in "_-" else "_" for c in raw["name"])[:60]
        if name in seen or not raw["description"].strip():
            continue
        try:
            tools.append(Tool(name=name, description=raw["description"], tags=["bench"]))
        except ValueError:
            continue
        seen.add(name)
        if len(tools) >= limit:
            break
    queries = [
        json.loads(line)["query"]
        for line in (source / "queries.jsonl").read_text().splitlines()[:150]
    ]
    kits = [
        Toolkit(name=f"kit{i}", version="1", tools=tools[i : i + 100])
        for i in range(0, len(tools), 100)
    ]
    return kits, queries


def exact_fts5(catalog: Catalog, query: str, k: int) -> list[tuple[int, float]]:
    conn = catalog._conn
    stats = bm25.TermStats()
    stats.refresh(conn, catalog.revision)
    return bm25.search(conn, query, Filters(), k, stats, exact_postings=10**12)


def test_postings_rank_as_fts5_on_real_tools(catalog: Catalog) -> None:
    kits, queries = bench_toolkits()
    catalog.register(kits)
    index = PostingsIndex()
    index.build(catalog._conn, catalog.revision, bm25.DEFAULT_WEIGHTS)
    rng = random.Random(7)
    queries += [" ".join(rng.sample(q.split(), min(3, len(q.split())))) for q in queries[:50]]
    compared = 0
    for query in queries:
        for k in (1, 10):
            expected = exact_fts5(catalog, query, k)
            got = index.search(query, k, bm25.MAX_QUERY_TERMS)
            assert [round(s, 6) for _, s in got] == pytest.approx(
                [round(s, 6) for _, s in expected], abs=1e-5
            ), query
            # Same ids wherever scores differ by more than rounding (ties may swap).
            tied = {round(s, 5) for _, s in expected}
            if len(tied) == len(expected):
                assert [i for i, _ in got] == [i for i, _ in expected], query
            compared += 1
    assert compared >= 300


def test_engine_switches_to_postings_and_rebuilds_when_the_revision_moves(
    catalog: Catalog,
) -> None:
    catalog.register(SAMPLE_TOOLKITS)
    engine = catalog._search
    for _ in range(POSTINGS_AFTER):
        first = catalog.search("delete a file", mode="bm25", k=5)
    assert engine.postings.revision == catalog.revision
    assert catalog.search("delete a file", mode="bm25", k=5) == first
    # A new tool: the index of the old revision is never served.
    catalog.register(
        Toolkit(
            name="shredder",
            version="1",
            tools=[Tool(name="shred_file", description="Delete a file so it cannot be restored")],
        )
    )
    hits = catalog.search("shred a file", mode="bm25", k=3).hits
    assert hits[0].tool.id == "shredder.shred_file"
    for _ in range(POSTINGS_AFTER):
        again = catalog.search("shred a file", mode="bm25", k=3)
    assert engine.postings.revision == catalog.revision
    assert [h.tool.id for h in again.hits] == [h.tool.id for h in hits]
    # Filters go to FTS5 and agree.
    filtered = catalog.search("delete a file", mode="bm25", k=5, toolkit="files")
    ranked = [h.tool.id for h in first.hits]
    assert [i for i in (h.tool.id for h in filtered.hits) if i in ranked] == [
        i for i in ranked if i.startswith("files.")
    ]
