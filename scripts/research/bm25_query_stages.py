"""Where a warm BM25 query's CPU goes, stage by stage, in one serving process.

Opens the catalog as a server does, serves 300 queries twice (the first time its saved BM25
index is loaded, or built and saved), then for 300 new ones (those ``bench_scale.py --bm25``
times) measures the thread CPU of the whole ``Catalog.search(q, mode="bm25")`` (no kept
answer), of ``terms``, of ``rank`` alone, of tantivy's top 26 and top 104 for the same
query, and of the same query scoring every matching tool (``count=True``: no pruning); and
counts the tools rescored, the postings of the query's terms and the tantivy rounds.

    python scripts/research/bm25_query_stages.py DB SIZE
    python scripts/research/bm25_query_stages.py DB SIZE --split

Prints one JSON object: each figure as [p50, p99, mean] (ms, or a count). ``--split``: the
same 300 searches with the engine's steps wrapped in timers instead (tokenize, the terms
kept, the index's ``rank``, tantivy's own call, the hits' documents and match signals,
building the answer and its tools, remembering the hits...): each step's mean thread CPU a
query, inclusive of the steps inside it (the wrappers add ~1 µs each).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]

import tantivy  # noqa: E402

import bench_scale  # noqa: E402
from toolcat import Catalog  # noqa: E402

COUNTS = ("rescored", "terms_asked", "postings")


def split(catalog: Any, index: Any, then: list[str]) -> dict[str, Any]:
    """``--split``: mean thread CPU a query of each wrapped step (inclusive)."""
    from toolcat import catalog as catalog_module
    from toolcat.search import bm25, calibration, engine, fusion, lexical_index

    spent: dict[str, float] = {}

    def wrap(owner: Any, name: str, label: str) -> None:
        step = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return step(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - started

        setattr(owner, name, timed)

    search_engine = engine.SearchEngine
    for owner, name, label in [
        (search_engine, "rank", "engine.rank (ranking, signals, match)"),
        (search_engine, "_rank", "engine._rank"),
        (search_engine, "bm25", "engine.bm25 (terms kept, index rank)"),
        (lexical_index.TantivyIndex, "rank", "index.rank"),
        (search_engine, "_documents", "hits' documents"),
        (fusion, "candidates", "fusion.candidates (match signals)"),
        (search_engine, "result", "result (SearchResult, hits)"),
        (search_engine, "_tools", "result's tools (kept or read)"),
        (catalog_module.Catalog, "searched", "Catalog.searched (hits remembered)"),
        (engine, "tokenize", "tokenize"),
        (bm25, "useful_terms", "useful_terms"),
        (calibration, "down_the_ranks", "down_the_ranks"),
        (engine.reader, "revision", "reader.revision (SQL)"),
    ]:
        wrap(owner, name, label)
    searcher = index._searcher

    class TimedSearcher:
        def search(self, *args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return searcher.search(*args, **kwargs)
            finally:
                spent["tantivy's search"] = (
                    spent.get("tantivy's search", 0.0) + time.thread_time() - started
                )

        def __getattr__(self, name: str) -> Any:
            return getattr(searcher, name)

    index._searcher = TimedSearcher()
    answers = bench_scale.kept_answers(catalog)
    whole = []
    for q in then:
        answers.clear()
        started = time.thread_time()
        catalog.search(q, k=10, mode="bm25")
        whole.append(time.thread_time() - started)
    out: dict[str, Any] = {
        "whole search p50": round(statistics.median(whole) * 1e3, 3),
        "whole search mean": round(statistics.mean(whole) * 1e3, 3),
    }
    for label, total in sorted(spent.items(), key=lambda item: -item[1]):
        out[label] = round(total / len(then) * 1e3, 3)
    return out


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    db, size = sys.argv[1], int(sys.argv[2])
    texts = bench_scale.queries(random.Random(bench_scale.SEED + size), 900)
    warm, then = texts[600:], texts[300:600]
    catalog = Catalog(db)
    for q in warm:
        catalog.search(q, k=10, mode="bm25")
    bench_scale.bm25_ready(catalog)  # the index and its native first stage
    for q in warm:
        catalog.search(q, k=10, mode="bm25")
    index: Any = catalog._search.postings.index
    if "--split" in sys.argv[3:]:
        print(json.dumps({"tools": size, **split(catalog, index, then)}))
        return
    answers = bench_scale.kept_answers(catalog)
    scored = [0]
    score = index._score

    def counting(doc: int, ids: Any, keep: bool = True) -> float:
        scored[0] += 1
        return float(score(doc, ids, keep))

    index._score = counting
    index.rounds.clear()
    taken: dict[str, list[float]] = {
        name: []
        for name in ("search", "terms", "rank", "top_26", "top_104", "every_match", *COUNTS)
    }

    def timed(name: str, run: Any) -> Any:
        started = time.thread_time()
        result = run()
        taken[name].append(time.thread_time() - started)
        return result

    search = index._searcher.search
    for q in then:
        answers.clear()
        timed("search", lambda q=q: catalog.search(q, k=10, mode="bm25"))
        terms = timed("terms", lambda q=q: index.terms(q, 32))
        taken["terms_asked"].append(len(terms))
        taken["postings"].append(sum(index.doc_freq[t] for t in terms))
        if not terms:
            continue
        scored[0] = 0
        timed("rank", lambda terms=terms: index.rank(terms, 10))
        taken["rescored"].append(scored[0])
        query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, index._queries[t]) for t in terms]
        )
        timed("every_match", lambda query=query: search(query, 26, count=True).hits)
        timed("top_26", lambda query=query: search(query, 26, count=False).hits)
        timed("top_104", lambda query=query: search(query, 104, count=False).hits)
    out: dict[str, Any] = {"tools": size, "tantivy_rounds": dict(index.rounds)}
    for name, values in taken.items():
        ordered = sorted(values)
        unit = 1 if name in COUNTS else 1e3
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        out[name] = [
            round(statistics.median(ordered) * unit, 3),
            round(p99 * unit, 3),
            round(statistics.mean(ordered) * unit, 3),
        ]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
