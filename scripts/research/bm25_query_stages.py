"""Where a warm BM25 query's CPU goes, stage by stage, in one serving process.

Opens the catalog as a server does, serves 300 queries twice (the first time its saved BM25
index is loaded, or built and saved), then for 300 new ones (those ``bench_scale.py --bm25``
times) measures the thread CPU of the whole ``Catalog.search(q, mode="bm25")`` (no kept
answer), of ``terms``, of ``rank`` alone, of tantivy's top 26 and top 104 for the same
query, and of the same query scoring every matching tool (``count=True``: no pruning); and
counts the tools rescored, the postings of the query's terms and the tantivy rounds.

    python scripts/research/bm25_query_stages.py DB SIZE

Prints one JSON object: each figure as [p50, p99, mean] (ms, or a count).
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
    catalog._search.postings.wait()
    for q in warm:
        catalog.search(q, k=10, mode="bm25")
    index: Any = catalog._search.postings.index
    answers = getattr(catalog._search, "_answers", {})
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
