"""Warm hybrid search in a long-lived process, this checkout beside another (issue 22).

Each variant runs in its own process (``PYTHONPATH`` = its ``src``) that opens its catalog,
answers a few warm-up searches, then times ``--per-batch`` distinct benchmark queries (seeded
from ``../shared/bench``; never repeated, so no query vector comes from the cache) through
``Catalog.search`` (hybrid, k 5): wall ms and process CPU ms (every thread: onnxruntime's
pool included) per search. Variants take turns batch by batch (``--batches``), each batch a
fresh process with the next slice of queries; the load average is read before and after.

    python scripts/research/warm_hybrid.py --variant before=/tmp/old/src:/tmp/old.db \\
        --variant now=src:/tmp/now.db [--batches 4] [--per-batch 50]

Catalogs: each code builds and reindexes its own (code before schema 4 cannot open today's).
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

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT.parent / "shared" / "bench"

CHILD = """
import json, sys, time
from toolcat import Catalog
db, queries = sys.argv[1], json.loads(sys.argv[2])
catalog = Catalog(db)
for q in ("warm up the encoder", "list the files in a folder", "what time is it in Tokyo"):
    catalog.search(q, k=5)
rows = []
for q in queries:
    c0, t0 = time.process_time(), time.perf_counter()
    result = catalog.search(q, k=5)
    rows.append(((time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000))
assert result.mode == "hybrid", result.mode
print(json.dumps(rows))
"""


def queries(count: int, seed: int) -> list[str]:
    pool = []
    for folder in sorted(BENCH.iterdir()):
        path = folder / "queries.jsonl"
        if path.is_file():
            pool += [json.loads(line)["query"] for line in path.read_text().splitlines() if line]
    return random.Random(seed).sample(sorted(set(pool)), count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", default=[], help="NAME=SRC:DB")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--per-batch", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    variants = {}
    for spec in args.variant:
        name, rest = spec.split("=", 1)
        src, db = rest.rsplit(":", 1)
        variants[name] = (str(Path(src).resolve()), db)
    sample = queries(args.batches * args.per_batch, args.seed)
    names = list(variants)
    rows: dict[str, list[list[float]]] = {n: [] for n in names}
    load = os.getloadavg()[0]
    for b in range(args.batches):
        chunk = sample[b * args.per_batch : (b + 1) * args.per_batch]
        for name in names[b % len(names) :] + names[: b % len(names)]:
            src, db = variants[name]
            env = {**os.environ, "PYTHONPATH": src}
            out = subprocess.run(
                [sys.executable, "-c", CHILD, db, json.dumps(chunk)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            rows[name] += json.loads(out.stdout.splitlines()[-1])
    print(
        f"{len(sample)} queries per variant, {args.batches} alternated batches; "
        f"load {load:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print("| variant | wall p50 / p90 ms | CPU p50 ms |")
    print("|---|---|---|")
    for name in names:
        wall = sorted(r[0] for r in rows[name])
        cpu = [r[1] for r in rows[name]]
        p90 = wall[int(0.9 * len(wall))]
        print(
            f"| {name} | {statistics.median(wall):.2f} / {p90:.2f} | {statistics.median(cpu):.2f} |"
        )


if __name__ == "__main__":
    main()
