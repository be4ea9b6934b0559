"""Can a cheaper first stage than tantivy's disjunction over every query term keep BM25's
top k? Measured on a catalog made by ``scripts/bench_scale.py --make-catalog``, with the
queries ``bench_scale.py --bm25`` times (300 new ones after its 600), on the same
``TantivyIndex`` the serving process ranks with (built here, in memory):

- ``pruning``: tantivy's top 26 (block-max WAND) against the same query with a count, which
  scores every tool that holds a query term: how much pruning the full disjunction saves;
  and the same boosted query against plain term queries.
- ``maxscore``: MaxScore with an oracle threshold (the exact 10th score, known in advance):
  the commonest terms whose bounds sum below it made optional (``Must`` the rest, ``Should``
  them). Exact by construction; its time is the best any threshold could give.
- ``candidates``: the issue's idea, candidates from the rarest terms (while their document
  frequencies add up to at most ``beta`` times the catalog), tantivy's best ``N`` of them,
  each rescored exactly with every term: how often the exact top 10 (ids, order) and top-5
  set survive, and the CPU of both steps.

    python scripts/research/bm25_first_stage.py DB SIZE {pruning,maxscore,candidates}...

Times are thread CPU, the best of three runs of each query (the other stages the query
needs are not included). Findings: docs/benchmarks.md, "Warm BM25 at 1M: why the first
stage cannot be cut while it stays exact".
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]

import bench_scale  # noqa: E402
from toolcat.search.bm25 import DEFAULT_WEIGHTS  # noqa: E402
from toolcat.search.lexical_index import TantivyIndex, tantivy_module  # noqa: E402


def build(conn: sqlite3.Connection) -> TantivyIndex:
    index = TantivyIndex()
    index.build(conn, 0, DEFAULT_WEIGHTS)
    return index


def best_of_three(index: TantivyIndex, query: Any, depth: int, count: bool = False) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.thread_time()
        index._searcher.search(query, depth, count=count).hits  # noqa: B018
        best = min(best, time.thread_time() - started)
    return best


def term(index: TantivyIndex, word: str, boosted: bool = True) -> Any:
    tantivy = tantivy_module()
    query = tantivy.Query.term_query(index._schema, "body", word)
    return tantivy.Query.boost_query(query, index._boost[word]) if boosted else query


def disjunction(index: TantivyIndex, words: list[str], boosted: bool = True) -> Any:
    tantivy = tantivy_module()
    should = tantivy.Occur.Should
    return tantivy.Query.boolean_query([(should, term(index, w, boosted)) for w in words])


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"p50 {statistics.median(ordered) * 1e3:.3f} / p99 {p99 * 1e3:.3f} ms"


def pruning(index: TantivyIndex, queries: list[list[str]]) -> None:
    top, counted, plain = [], [], []
    for words in queries:
        top.append(best_of_three(index, disjunction(index, words), 26))
        counted.append(best_of_three(index, disjunction(index, words), 26, count=True))
        plain.append(best_of_three(index, disjunction(index, words, boosted=False), 26))
    print("top 26 (block-max WAND):", ms(top))
    print("every matching tool scored (count):", ms(counted))
    print("unboosted term queries, top 26:", ms(plain))


def maxscore(index: TantivyIndex, queries: list[list[str]]) -> None:
    tantivy = tantivy_module()
    full, split, optional = [], [], []
    for words in queries:
        exact = index.rank(words, 10)
        if len(exact) < 10:
            continue
        threshold = exact[-1][1]
        bounds = [index._idf[i] for i in index._ids(words)]  # a term adds < IDF (K1 + 1)
        cut, total = len(words), 0.0
        while cut > 1 and total + bounds[cut - 1] < threshold:
            total += bounds[cut - 1]
            cut -= 1
        needed, rest = words[:cut], words[cut:]
        query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, disjunction(index, needed))]
            + [(tantivy.Occur.Should, term(index, w)) for w in rest]
        )
        full.append(best_of_three(index, disjunction(index, words), 26))
        split.append(best_of_three(index, query if rest else disjunction(index, words), 26))
        optional.append(len(rest) / len(words))
    print(f"{len(full)} queries with 10 hits")
    print("full disjunction:", ms(full))
    print("MaxScore, oracle threshold:", ms(split))
    print(f"share of terms made optional: median {statistics.median(optional):.2f}")


def candidates(index: TantivyIndex, queries: list[list[str]]) -> None:
    row_of = index._row_ids
    exact = [index.rank(words, 10) for words in queries]
    for beta in (0.01, 0.03, 0.1, 0.3):
        for depth in (30, 100, 300):
            asked, first, rescoring, same_10, same_5 = [], [], [], 0, 0
            for words, best in zip(queries, exact, strict=True):
                budget, rare, held = beta * index.n_docs, [], 0
                for w in words:
                    if rare and held + index.doc_freq[w] > budget:
                        break
                    rare.append(w)
                    held += index.doc_freq[w]
                asked.append(len(rare))
                first.append(best_of_three(index, disjunction(index, rare), depth))
                hits = index._searcher.search(disjunction(index, rare), depth, count=False).hits
                ids = index._ids(words)
                started = time.thread_time()
                scored = sorted(
                    ((index._score(row_of[a.doc], ids), -row_of[a.doc]) for _, a in hits),
                    reverse=True,
                )[:10]
                rescoring.append(time.thread_time() - started)
                got = [-doc for _, doc in scored]
                want = [doc for doc, _ in best]
                same_10 += got == want
                same_5 += set(got[:5]) == set(want[:5])
            print(
                f"beta {beta} N {depth}: terms asked median {statistics.median(asked)}, "
                f"tantivy {ms(first)}, rescoring {ms(rescoring)}, "
                f"top 10 kept {same_10 / len(queries):.3f}, top-5 set kept "
                f"{same_5 / len(queries):.3f}",
                flush=True,
            )


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    db, size, wanted = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    conn = sqlite3.connect(db)
    conn.execute("BEGIN")
    texts = bench_scale.queries(random.Random(bench_scale.SEED + size), 900)[300:600]
    index = build(conn)
    queries = [words for words in (index.terms(q, 32) for q in texts) if words]
    for what in wanted:
        print(f"== {what}, {size} tools, {len(queries)} queries", flush=True)
        {"pruning": pruning, "maxscore": maxscore, "candidates": candidates}[what](index, queries)


if __name__ == "__main__":
    main()
