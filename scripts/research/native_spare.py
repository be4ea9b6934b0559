"""The native BM25 stage with a long query's common terms spared, at several settings.

Opens the catalog as a server does, waits for its BM25 index and native first stage, then
for 300 queries asks ``Index.best`` for the top ``--k`` with every term (exact), and for
each setting, query by query beside it:

- ``share:most:when[:first]``: the terms held by more than ``share`` of the tools spared
  when they hold ``when`` of the query's postings or more, ``most`` candidates in one pass
  (or ``first`` at first, then four times as many until ``most``);
- ``shipped``: as ``TantivyIndex._spare_above`` decides (``SPARE_WHEN``,
  ``SPARED_IDF_MOST``), one pass of ``SPARED_CANDIDATES``;

each asked again with every term when not certified (as ``TantivyIndex._rank_by_impacts``
does). Queries: ``bench`` (the 300 ``bench_scale.py --bm25`` times, or with ``--draw N``
300 others of its pool, drawn with its seed + N: held out from settings chosen on those) or
``band`` (300 of one or two terms more than 20% of the tools hold and two to six held by
5-20%, no rarer one, whose common terms hold 30-50% of the postings: attack47). Prints each
setting's thread CPU p50 / p90 / p99 / mean (ms), the answers identical to the exact ones,
the queries that spared terms and those asked again.

    python scripts/research/native_spare.py DB SIZE 0.2:512:0.5:128,0.2:256:0.3,shipped
    python scripts/research/native_spare.py DB SIZE shipped --queries band --k 20
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]

import bench_scale  # noqa: E402
from toolcat import Catalog  # noqa: E402
from toolcat.search import lexical_index  # noqa: E402


def band(index: Any, rng: random.Random, count: int = 300) -> list[list[int]]:
    """``count`` queries of common and middling terms, no rarer one, whose common terms hold
    30-50% of the postings (term ids)."""
    df, n_docs = index._df, index.n_docs
    above = int(n_docs * lexical_index.SPARE_SHARE)
    terms = range(len(df))
    common = [i for i in terms if df[i] > above]
    middling = [i for i in terms if 0.05 * n_docs < df[i] <= above]
    asked: list[list[int]] = []
    while len(asked) < count:
        ids = rng.sample(common, rng.randint(1, 2)) + rng.sample(middling, rng.randint(2, 6))
        held = [df[i] for i in ids]
        if 0.3 <= sum(f for f in held if f > above) / sum(held) < 0.5:
            asked.append(ids)
    return asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("db", help="A catalog made by bench_scale.py (read only).")
    parser.add_argument("size", type=int, help="Its size, as bench_scale.py seeds queries.")
    parser.add_argument(
        "settings", help="share:most:when[:first] or shipped, comma separated (see above)"
    )
    parser.add_argument("--queries", choices=("bench", "band"), default="bench")
    parser.add_argument("--draw", type=int, default=0, help="bench queries: another 300 (N > 0)")
    parser.add_argument("--k", type=int, default=10, help="the top asked (10)")
    args = parser.parse_args()
    db, size, k = args.db, args.size, args.k
    settings = [
        s if s == "shipped" else tuple(float(v) for v in s.split(":"))
        for s in args.settings.split(",")
    ]
    texts = bench_scale.queries(random.Random(bench_scale.SEED + size + args.draw), 900)
    catalog = Catalog(db)
    for text in texts[600:610]:
        catalog.search(text, k=k, mode="bm25")
    if bench_scale.bm25_ready(catalog) != "native":
        raise SystemExit("the native first stage is not built here")
    index = catalog._search.postings.index
    stage, df, n_docs = index._impacts.index, index._df, index.n_docs
    if args.queries == "band":
        asked = band(index, random.Random(9))
    else:
        asked = [index._ids(index.terms(text, 32)) for text in texts[300:600]]
    depth, slack = k + lexical_index.EXTRA_CANDIDATES, lexical_index.SLACK
    exact: list[object] = []
    results: dict[object, list[tuple[float, object]]] = {s: [] for s in [None, *settings]}
    spared = dict.fromkeys(settings, 0)
    again = dict.fromkeys(settings, 0)
    for term_ids in asked:
        for setting in [None, *settings]:
            began = time.thread_time()
            rounds = 0
            if setting == "shipped":
                above = index._spare_above(term_ids, k)
                start = most = max(lexical_index.SPARED_CANDIDATES, depth)
            elif setting is not None:
                share, most, when, start = (*setting, setting[1])[:4]
                above = int(n_docs * share)
                held = [df[i] for i in term_ids if i >= 0]
                if sum(f for f in held if f > above) < max(when * sum(held), 1):
                    above = -1
            if setting is not None and above >= 0:
                spared[setting] += 1
                found, rounds, _ = stage.best(term_ids, k, int(start), int(most), slack, above)
                again[setting] += not rounds
            if not rounds:
                found, rounds, _ = stage.best(
                    term_ids, k, depth, lexical_index.MAX_CANDIDATES, slack
                )
            results[setting].append((time.thread_time() - began, found))
            if setting is None:
                exact.append(found)
    for setting, rows in results.items():
        times = sorted(t for t, _ in rows)
        n = len(times)
        same = sum(found == want for (_, found), want in zip(rows, exact, strict=True))
        line = "exact"
        if setting == "shipped":
            line = "shipped"
        elif setting is not None:
            share, most, when, start = (*setting, setting[1])[:4]
            line = f"share {share} most {int(most)} when {when} from {int(start)}"
        if setting is not None:
            line += f" (spared {spared[setting]}, asked again {again[setting]})"
        p50, p90, p99 = (times[int(n * q)] * 1e3 for q in (0.5, 0.9, 0.99))
        print(
            f"{line}: p50 {p50:.3f} p90 {p90:.3f} p99 {p99:.3f} "
            f"mean {sum(times) / n * 1e3:.3f} ms; identical {same}/{n}"
        )


if __name__ == "__main__":
    main()
