"""The native BM25 stage with a long query's common terms spared, at several settings.

Opens the catalog as a server does, waits for its BM25 index and native first stage, then
for 300 new bench queries (those ``bench_scale.py --bm25`` times) asks ``Index.best`` for
the top 10 with every term (exact), and for each setting ``share:most:when`` with the terms
held by more than ``share`` of the tools spared when they hold ``when`` of the query's
postings or more, ``most`` candidates at once (or ``depth`` first, then four times as many
until ``most``), asked again with every term when not
certified (as ``TantivyIndex._rank_by_impacts`` does). Prints each setting's thread CPU
p50 / p90 / p99 / mean (ms), the answers identical to the exact ones, the queries that
spared terms and those asked again.

    python scripts/research/native_spare.py DB SIZE 0.2:512:0.5,0.1:512:0.5,0.2:512:0.5:26
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]

import bench_scale  # noqa: E402
from toolcat import Catalog  # noqa: E402
from toolcat.search import lexical_index  # noqa: E402

K = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("db", help="A catalog made by bench_scale.py (read only).")
    parser.add_argument("size", type=int, help="Its size, as bench_scale.py seeds queries.")
    parser.add_argument(
        "settings", help="share:most:when[:depth],... (e.g. 0.2:512:0.5; depth: the first round's)"
    )
    args = parser.parse_args()
    db, size = args.db, args.size
    settings = [tuple(float(v) for v in s.split(":")) for s in args.settings.split(",")]
    texts = bench_scale.queries(random.Random(bench_scale.SEED + size), 900)
    catalog = Catalog(db)
    for text in texts[600:610]:
        catalog.search(text, k=K, mode="bm25")
    if bench_scale.bm25_ready(catalog) != "native":
        raise SystemExit("the native first stage is not built here")
    index = catalog._search.postings.index
    stage, df, n_docs = index._impacts.index, index._df, index.n_docs
    asked = [index._ids(index.terms(text, 32)) for text in texts[300:600]]
    depth, slack = K + lexical_index.EXTRA_CANDIDATES, lexical_index.SLACK
    exact: list[object] = []
    results: dict[object, list[tuple[float, object]]] = {s: [] for s in [None, *settings]}
    spared = dict.fromkeys(settings, 0)
    again = dict.fromkeys(settings, 0)
    for term_ids in asked:
        for setting in [None, *settings]:
            began = time.thread_time()
            rounds = 0
            if setting is not None:
                share, most, when, start = (*setting, setting[1])[:4]
                above = int(n_docs * share)
                held = [df[i] for i in term_ids if i >= 0]
                if sum(f for f in held if f > above) >= max(when * sum(held), 1):
                    spared[setting] += 1
                    found, rounds, _ = stage.best(term_ids, K, int(start), int(most), slack, above)
                    again[setting] += not rounds
            if not rounds:
                found, rounds, _ = stage.best(term_ids, K, depth, 4096, slack)
            results[setting].append((time.thread_time() - began, found))
            if setting is None:
                exact.append(found)
    for setting, rows in results.items():
        times = sorted(t for t, _ in rows)
        same = sum(found == want for (_, found), want in zip(rows, exact, strict=True))
        line = "exact"
        if setting is not None:
            share, most, when, start = (*setting, setting[1])[:4]
            line = f"share {share} most {int(most)} when {when} from {int(start)}"
            line += f" (spared {spared[setting]}, asked again {again[setting]})"
        print(
            f"{line}: p50 {times[150] * 1e3:.3f} p90 {times[270] * 1e3:.3f} "
            f"p99 {times[297] * 1e3:.3f} mean {sum(times) / len(times) * 1e3:.3f} ms; "
            f"identical {same}/{len(rows)}"
        )


if __name__ == "__main__":
    main()
