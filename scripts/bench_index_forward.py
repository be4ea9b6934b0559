"""What a small write costs once the BM25 index is saved beside a large catalog, and what a
fresh process answers after it: two toolcat sources side by side on copies of one catalog.

For each source (``--src``, a folder that holds the ``toolcat`` package), in turn, on a
fresh copy of the catalog and its saved index:

1. prime: open the copy with that source (migrations) and save its index at the current
   revision (not timed: what the writes before left);
2. the write: one toolkit of ``--tools`` new tools registered in a fresh process, the index
   saved before it returns, as ``toolcat register`` does: wall and CPU seconds, and whether
   tantivy's part was kept (brought forward) or built again;
3. a fresh process loads the saved index and answers ``--queries`` benchmark queries (BM25,
   top 10): its first-query time, and a digest of every (tool, score) it returned, which
   must be the same for both sources.

    python scripts/bench_index_forward.py /work/runs/c100k.db --src OLD/src --src src

Figures in docs/benchmarks.md ("A small write to a large catalog").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "bench"

PRIME = """
import sys
from toolcat import Catalog
from toolcat.search import bm25, lexical_index
with Catalog(sys.argv[1]) as catalog:
    pass
lexical_index.save_current(sys.argv[1], bm25.DEFAULT_WEIGHTS)
"""

WRITE = """
import json, resource, sys, time
from toolcat import Catalog, Tool, Toolkit
n, tag = int(sys.argv[2]), sys.argv[3]
kit = Toolkit(name=f"forward_{tag}", version="1.0.0", tools=[
    Tool(name=f"probe_{tag}_{i}", description=f"look up weather station {i} readings and "
         f"forecast pressure trends for region {tag} with hourly detail")
    for i in range(n)])
start, cpu = time.perf_counter(), time.process_time()
with Catalog(sys.argv[1]) as catalog:
    catalog.register(kit)
    error = catalog.index_error
print(json.dumps({"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
                  "error": error,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

SERVE = """
import hashlib, json, sys, time
from toolcat import Catalog
from toolcat.search import bm25, engine
queries = json.loads(open(sys.argv[2]).read())
start = time.perf_counter()
with Catalog(sys.argv[1]) as catalog, catalog._snapshot() as conn:
    index = catalog._search.postings
    loaded = index.load_saved(conn, catalog.revision, bm25.DEFAULT_WEIGHTS, sys.argv[1])
    load_s = time.perf_counter() - start
    first = None
    digest = hashlib.sha256()
    t0 = time.perf_counter()
    for query in queries:
        hits = index.search(query, 10, bm25.MAX_QUERY_TERMS)
        first = first if first is not None else time.perf_counter() - t0
        digest.update(repr(hits).encode())
    each_ms = (time.perf_counter() - t0) / len(queries) * 1000
print(json.dumps({"loaded": loaded, "load_s": load_s, "first_query_ms": first * 1000,
                  "mean_query_ms": each_ms, "answers": digest.hexdigest()[:16]}))
"""


def run(src: str, code: str, *args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1])) if out.strip() else {}


def stamp(db: Path) -> dict[str, object]:
    return dict(json.loads((Path(str(db) + ".bm25") / "index.json").read_text()))


def queries(n: int) -> list[str]:
    found: list[str] = []
    for source in sorted(BENCH.glob("*/queries.jsonl")):
        for line in source.read_text().splitlines()[: n // 7 + 1]:
            found.append(json.loads(line)["query"])
    return found[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("catalog", type=Path)
    parser.add_argument("--src", action="append", required=True)
    parser.add_argument("--tools", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--tmp", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(dir=args.tmp, prefix="forward-"))
    asked = work / "queries.json"
    asked.write_text(json.dumps(queries(args.queries)))
    try:
        for round_ in range(args.rounds):
            for src in args.src:
                db = work / "c.db"
                shutil.copyfile(args.catalog, db)
                saved = Path(str(args.catalog) + ".bm25")
                if saved.is_dir():
                    shutil.copytree(saved, str(db) + ".bm25")
                t0 = time.perf_counter()
                run(src, PRIME, str(db))
                prime_s = time.perf_counter() - t0
                before = stamp(db)
                load = os.getloadavg()[0]
                wrote = run(src, WRITE, str(db), str(args.tools), f"r{round_}")
                after = stamp(db)
                served = run(src, SERVE, str(db), str(asked))
                print(
                    json.dumps(
                        {
                            "src": src,
                            "round": round_,
                            "load": [round(load, 1), round(os.getloadavg()[0], 1)],
                            "prime_s": round(prime_s, 1),
                            **{
                                k: round(v, 2) if isinstance(v, float) else v
                                for k, v in wrote.items()
                            },
                            "tantivy_kept": after["tantivy"] == before["tantivy"],
                            "saved_at_write": after["revision"] != before["revision"],
                            **{
                                f"serve_{k}": round(v, 3) if isinstance(v, float) else v
                                for k, v in served.items()
                            },
                        }
                    ),
                    flush=True,
                )
                os.unlink(db)
                shutil.rmtree(str(db) + ".bm25", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
