"""Benchmark the first BM25 queries of a serving process whose files are cold on disk.

For each ``--src`` in turn, every round (alternated): the page cache is dropped
(``/proc/sys/vm/drop_caches``, as root; otherwise the run says ``"cold": false``), then a fresh
process opens ``CATALOG`` with that toolkit package, takes up its saved BM25 index as
``toolcat serve`` does before it listens (``Catalog.warm``, timed), and asks the first 300
benchmark queries (bench_scale.py's, seeded for ``--size``), each timed in wall and thread
CPU time. Reports p50 / p99 per source and round.

    python scripts/bench_cold_first.py /path/1m.db --size 1000000 --src OLD/src --src src
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys, time
from toolcat import Catalog
catalog = Catalog(sys.argv[1])
queries = json.loads(sys.stdin.read())
t0 = time.perf_counter()
catalog.warm()
loaded = time.perf_counter() - t0
wall, cpu = [], []
for q in queries:
    t0, c0 = time.perf_counter(), time.thread_time()
    catalog.search(q, k=10, mode="bm25")
    cpu.append(time.thread_time() - c0)
    wall.append(time.perf_counter() - t0)
print(json.dumps({"warm_s": loaded, "wall": wall, "cpu": cpu}))
"""


def first_queries(size: int) -> list[str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_scale", ROOT / "scripts" / "bench_scale.py"
    )
    assert spec and spec.loader
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    return list(scale.queries(random.Random(scale.SEED + size), 600 + 300)[:300])


def drop_caches() -> bool:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return False
    return True


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def one_run(catalog: Path, src: Path, queries: list[str]) -> dict[str, Any]:
    cold = drop_caches()
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(catalog)],
        input=json.dumps(queries),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(src.resolve())},
        timeout=900,
        check=True,
    )
    got = json.loads(child.stdout)
    return {
        "cold": cold,
        "warm_s": round(got["warm_s"], 2),
        "wall_p50_ms": ms(got["wall"], 0.5),
        "wall_p99_ms": ms(got["wall"], 0.99),
        "cpu_p50_ms": ms(got["cpu"], 0.5),
        "cpu_p99_ms": ms(got["cpu"], 0.99),
        "all_s": round(sum(got["wall"]), 2),
        "load": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("catalog", type=Path)
    parser.add_argument("--size", type=int, default=1_000_000, help="bench_scale.py's seed.")
    parser.add_argument("--src", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    queries = first_queries(args.size)
    runs: dict[str, list[dict[str, Any]]] = {str(src): [] for src in args.src}
    for _ in range(args.rounds):
        for src in args.src:
            runs[str(src)].append(one_run(args.catalog, src, queries))
            print(json.dumps({str(src): runs[str(src)][-1]}), file=sys.stderr, flush=True)
    medians = {
        src: {
            key: statistics.median(run[key] for run in got)
            for key in ("wall_p50_ms", "wall_p99_ms", "cpu_p50_ms", "cpu_p99_ms")
        }
        for src, got in runs.items()
    }
    print(json.dumps({"catalog": str(args.catalog), "runs": runs, "medians": medians}))


if __name__ == "__main__":
    main()
