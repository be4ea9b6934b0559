"""What asking fewer of a query's terms would buy BM25 at 1M tools, and what it would cost.

BM25 asks at most ``bm25.MAX_QUERY_TERMS`` (32) of a query's terms, rarest first. Two runs:

- ``speed DB``: one serving process on a catalog made by ``bench_scale.py --make-catalog``
  serves 800 warm-up queries and waits for its index, then asks each of 300 new queries at
  every cap in turn (``--caps``; no kept answer: each is ranked), thread CPU p50/p99, and the
  share of each cap's top 5 that the top 5 at 32 terms also holds;
- ``eval CAP [toolcat eval options]``: ``toolcat eval`` with the cap set everywhere BM25 reads
  it (quality per source, e.g. ``--mode bm25 --mode hybrid --max-queries 1000 --seed 0``).

    python scripts/research/bm25_term_cap.py speed /tmp/vec/c1m.db --size 1000000
    python scripts/research/bm25_term_cap.py eval 12 ../shared/bench --mode bm25 --json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]

import bench_scale  # noqa: E402
from toolcat.search import bm25  # noqa: E402


def set_cap(cap: int) -> None:
    bm25.MAX_QUERY_TERMS = cap  # the engine reads it per query
    bm25.query_terms.__defaults__ = (cap, None)  # FTS5's path binds it as a default


def speed(db: str, size: int, caps: list[int]) -> None:
    from toolcat import Catalog

    qs = bench_scale.queries(random.Random(bench_scale.SEED + size), 2100)
    catalog = Catalog(db)
    for q in qs[600:1400]:
        catalog.search(q, k=10, mode="bm25")
    catalog._search.postings.wait()
    kept = getattr(catalog._search, "_answers", None)
    cpu: dict[int, list[float]] = {c: [] for c in caps}
    tops: dict[int, list[list[str]]] = {c: [] for c in caps}
    for q in qs[300:600]:
        for cap in caps:
            set_cap(cap)
            if kept is not None:
                kept.clear()
            t0 = time.thread_time()
            hits = catalog.search(q, k=10, mode="bm25").hits
            cpu[cap].append((time.thread_time() - t0) * 1000)
            tops[cap].append([h.tool.id for h in hits[:5]])
    base = max(caps)
    for cap in caps:
        times = sorted(cpu[cap])
        shared = statistics.mean(
            len(set(a) & set(b)) / max(1, len(b))
            for a, b in zip(tops[cap], tops[base], strict=True)
        )
        print(
            json.dumps(
                {
                    "cap": cap,
                    "p50_ms": round(statistics.median(times), 2),
                    "p99_ms": round(times[int(0.99 * len(times)) - 1], 2),
                    f"top5_shared_with_{base}": round(shared, 3),
                }
            )
        )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "eval":
        set_cap(int(sys.argv[2]))
        from toolcat.cli import main as toolcat

        sys.argv = ["toolcat", "eval", *sys.argv[3:]]
        toolcat()
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", choices=["speed"])
    parser.add_argument("db")
    parser.add_argument("--size", type=int, default=1_000_000, help="The catalog's --sizes.")
    parser.add_argument("--caps", type=int, nargs="+", default=[32, 16, 12, 8])
    args = parser.parse_args()
    speed(args.db, args.size, args.caps)


if __name__ == "__main__":
    main()
