"""Sparing's cost on queries whose spared terms outweigh the kept ones (attack47).

Opens the catalog as a server does, waits for its BM25 index and native first stage, then
times ``Index.best`` for a top 10 three ways, query by query in a shuffled order (thread
CPU): ``old`` (spared from 50% of the postings, 128 then 512 candidates), ``new`` (from 30%,
one pass of 256) and ``rule`` (as ``TantivyIndex._spare_above`` decides now, one pass of
256); each asked again with every term when not certified. Queries: ``bench`` (the 300
``bench_scale.py --bm25`` times), ``heldout`` (300 others of its pool) or ``band`` (300 of
one or two terms more than 20% of the tools hold and two to six held by 5-20%, whose
common terms hold 30-50% of the postings). Prints p50 / p90 / p99 / mean ms per way.

    python scripts/research/spare_outweighed.py DB SIZE band
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]

import bench_scale  # noqa: E402
from toolcat import Catalog  # noqa: E402
from toolcat.search import lexical_index as lx  # noqa: E402

K = int(os.environ.get("K", "10"))  # the top asked


def main() -> None:
    db, size, which = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    catalog = Catalog(db)
    for text in bench_scale.queries(random.Random(bench_scale.SEED + size), 10):
        catalog.search(text, k=K, mode="bm25")
    if bench_scale.bm25_ready(catalog) != "native":
        raise SystemExit("the native first stage is not built here")
    index = catalog._search.postings.index
    stage, df, n_docs = index._impacts.index, index._df, index.n_docs
    above, slack, depth = int(n_docs * 0.2), lx.SLACK, K + lx.EXTRA_CANDIDATES
    rng = random.Random(9)
    if which in ("bench", "heldout"):
        seed = bench_scale.SEED + size if which == "bench" else 12345 + size
        texts = bench_scale.queries(random.Random(seed), 900 if which == "bench" else 300)
        texts = texts[300:600] if which == "bench" else texts
        asked = [index._ids(index.terms(text, 32)) for text in texts]
        asked = [ids for ids in asked if any(i >= 0 for i in ids)]
    else:
        terms = range(len(index._terms))
        common = [i for i in terms if df[i] > 0.2 * n_docs]
        middling = [i for i in terms if 0.05 * n_docs < df[i] <= 0.2 * n_docs]
        asked = []
        while len(asked) < 300:
            ids = rng.sample(common, rng.randint(1, 2)) + rng.sample(middling, rng.randint(2, 6))
            held = [df[i] for i in ids]
            if 0.3 <= sum(f for f in held if f > above) / sum(held) < 0.5:
                asked.append(ids)

    def spares(ids: list[int], when: float) -> bool:
        held = [df[i] for i in ids if i >= 0]
        spared = sum(f for f in held if f > above)
        return bool(spared) and spared >= when * sum(held)

    def ask(ids: list[int], way: str) -> object:
        first, most, spare = {
            "old": (128, 512, spares(ids, 0.5)),
            "new": (256, 256, spares(ids, 0.3)),
            "rule": (256, 256, index._spare_above(ids, K) >= 0),
        }[way]
        if spare:
            found, rounds, _ = stage.best(ids, K, first, most, slack, above)
            if rounds:
                return found
        return stage.best(ids, K, depth, lx.MAX_CANDIDATES, slack, -1)[0]

    ways = ["old", "new", "rule"]
    took: dict[str, list[float]] = {way: [] for way in ways}
    for ids in asked:
        rng.shuffle(ways)
        found = []
        for way in ways:
            began = time.thread_time()
            found.append(ask(ids, way))
            took[way].append(time.thread_time() - began)
        assert all(f == found[0] for f in found)
    for way, times in took.items():
        times, n = sorted(times), len(times)
        p50, p90, p99 = (times[int(n * q)] * 1e3 for q in (0.5, 0.9, 0.99))
        mean = sum(times) / n * 1e3
        print(f"{which} {way}: p50 {p50:.3f} p90 {p90:.3f} p99 {p99:.3f} mean {mean:.3f} ms")
    old = sum(spares(q, 0.5) for q in asked)
    new = sum(spares(q, 0.3) for q in asked)
    rule = sum(index._spare_above(q, K) >= 0 for q in asked)
    print(f"spared: old {old} new {new} rule {rule} of {len(asked)}")


if __name__ == "__main__":
    main()
