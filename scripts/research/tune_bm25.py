"""Score BM25 column weights with the eval (seeded sample of queries per source).

    python scripts/research/tune_bm25.py [--max-queries 500] [--pooled]

Weights are (name, hint/examples, description, parameters, tags/toolkit). Prints mean R@5 and
nDCG@10 over the sources for each setting; the default in search/bm25.py came from here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from toolcat.quality.evaluate import evaluate  # noqa: E402
from toolcat.search import bm25  # noqa: E402

SETTINGS = [
    (1.0, 1.0, 1.0, 1.0, 1.0),
    (4.0, 2.0, 1.5, 1.0, 0.5),
    (2.0, 2.0, 1.5, 1.0, 0.5),
    (3.0, 2.0, 2.0, 1.0, 0.5),
    (4.0, 2.0, 1.5, 0.5, 0.25),
    (6.0, 3.0, 2.0, 1.0, 0.5),
    (4.0, 2.0, 1.5, 0.5, 0.5),
    (4.0, 2.0, 2.0, 0.5, 0.5),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-queries", type=int, default=500)
    parser.add_argument("--pooled", action="store_true")
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent / "shared" / "bench"))
    args = parser.parse_args()
    defaults = bm25.search.__defaults__
    assert defaults is not None
    for weights in SETTINGS:
        bm25.search.__defaults__ = (weights, *defaults[1:])
        rows = evaluate(args.bench, pooled=args.pooled, max_queries=args.max_queries)
        r5 = sum(r["R@5"] for r in rows) / len(rows)
        ndcg = sum(r["nDCG@10"] for r in rows) / len(rows)
        detail = " ".join(f"{r['source'][:8]}={r['R@5']:.3f}" for r in rows)
        print(f"{weights}  mean R@5 {r5:.4f}  mean nDCG@10 {ndcg:.4f}  ({detail})", flush=True)
    bm25.search.__defaults__ = defaults


if __name__ == "__main__":
    main()
