"""The embedding side of a serving process at 100k and 1M tools, exact scan against the ANN
graph, through toolcat's own ``VectorIndex`` (search/embeddings.py, search/ann.py), on the
realistic vectors of scripts/research/ann_vectors.py.

One run, three fresh processes per size: ``build`` fills a ``VectorIndex`` with the first
``--size`` vectors (as ``refresh`` would from SQLite; the ids are row numbers + 1) and lets its
background thread build the graph and save it beside a stand-in catalog path (timed: wall and
process CPU); ``serve`` is the next process at the same revision: it loads the saved graph
(timed), then asks every query at the depth hybrid search asks (``HYBRID_DEPTH`` = 50) with the
graph and with the exact scan, alternated query by query, and reports thread CPU p50/p99,
recall@10 of the graph path against the exact path, whether the scores of what both found
agree, and VmRSS/VmHWM (the float32 matrix plus the graph); ``exact`` times the exact scan
alone at smaller sizes (where the threshold ``ann.ANN_FROM`` sits).

    python scripts/research/ann_serving.py VECTORS_DIR --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from toolcat.search import ann  # noqa: E402
from toolcat.search.embeddings import VectorIndex  # noqa: E402

DEPTH = 50
MODEL = "toolcat-tool-retriever-v1"


def memory() -> dict[str, float]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    return out


def filled(folder: Path, size: int) -> VectorIndex:
    """A ``VectorIndex`` holding the first ``size`` vectors, as ``refresh`` leaves it."""
    data = np.load(folder / "vectors-1000000.npy", mmap_mode="r")
    index = VectorIndex()
    index.matrix = np.array(data[:size], dtype="<f4")
    index.ids = np.arange(1, size + 1, dtype=np.int64)
    index.tool_rows = index.active_tools = size
    index.owner = np.zeros(0, dtype=np.int64)
    index.key = (1, MODEL)
    return index


def percentiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "cpu_p50_ms": round(statistics.median(times) * 1000, 3),
        "cpu_p99_ms": round(times[int(len(times) * 0.99)] * 1000, 3),
    }


def child_build(folder: Path, size: int, path: str) -> dict[str, Any]:
    index = filled(folder, size)
    t0, c0 = time.perf_counter(), time.process_time()
    index._shortlist_soon(path)
    index.wait_shortlist()
    assert index.shortlist is not None, index.shortlist_error
    return {
        "build_s": round(time.perf_counter() - t0, 1),
        "build_cpu_s": round(time.process_time() - c0, 1),
        "file_mb": round(sum(p.stat().st_size for p in ann.folder(path).iterdir()) / 2**20, 1),
        **memory(),
    }


def child_serve(folder: Path, size: int, path: str) -> dict[str, Any]:
    # 300 queries from 1M rows on: each exact scan there is ~0.1 s of CPU
    queries = np.load(folder / "queries.npy")[: 300 if size >= 1_000_000 else None]
    index = filled(folder, size)
    before = memory()
    t0 = time.perf_counter()
    index._shortlist_soon(path)
    index.wait_shortlist()
    loaded = time.perf_counter() - t0
    graph = index.shortlist
    assert graph is not None, index.shortlist_error
    exact_t: list[float] = []
    graph_t: list[float] = []
    hits = same = compared = 0
    for q in queries:
        index.shortlist = None
        c0 = time.thread_time()
        truth = index.search(q, DEPTH)
        exact_t.append(time.thread_time() - c0)
        index.shortlist = graph
        c0 = time.thread_time()
        found = index.search(q, DEPTH)
        graph_t.append(time.thread_time() - c0)
        hits += len({i for i, _ in found[:10]} & {i for i, _ in truth[:10]})
        known = dict(truth)
        for i, score in found:
            if i in known:
                compared += 1
                same += score == known[i]
    return {
        "load_s": round(loaded, 2),
        "matrix_mb": round(index.matrix.nbytes / 2**20, 1) if index.matrix is not None else 0,
        "rss_before_graph": before,
        "rss": memory(),
        "exact": percentiles(exact_t),
        "graph": percentiles(graph_t),
        "recall_at_10": round(hits / (10 * len(queries)), 4),
        "same_scores": f"{same}/{compared}",
    }


def child_exact(folder: Path, size: int) -> dict[str, Any]:
    queries = np.load(folder / "queries.npy")[:200]
    index = filled(folder, size)
    times = []
    for q in queries:
        c0 = time.thread_time()
        index.search(q, DEPTH)
        times.append(time.thread_time() - c0)
    return percentiles(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--exact-sizes", type=int, nargs="*", default=[25_000, 50_000, 200_000])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = {"build": child_build, "serve": child_serve}.get(args.child)
        result = (
            run(args.folder, args.size, args.path) if run else child_exact(args.folder, args.size)
        )
        print(json.dumps(result))
        return

    def child(kind: str, size: int, path: str = "-") -> dict[str, Any]:
        command = [sys.executable, __file__, str(args.folder), "--child", kind]
        command += ["--size", str(size), "--path", path]
        load = os.getloadavg()[0]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            return {"error": done.stderr.strip().splitlines()[-3:]}
        found = dict(json.loads(done.stdout.strip().splitlines()[-1]))
        found["load"] = f"{load:.1f}-{os.getloadavg()[0]:.1f}"
        return found

    report: dict[str, Any] = {}
    for size in args.exact_sizes:
        report[f"exact_{size}"] = child("exact", size)
        print(size, report[f"exact_{size}"], flush=True)
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        for size in args.sizes:
            path = str(Path(tmp) / f"catalog-{size}.db")
            report[f"build_{size}"] = child("build", size, path)
            print(size, "build", report[f"build_{size}"], flush=True)
            report[f"serve_{size}"] = child("serve", size, path)
            print(size, "serve", report[f"serve_{size}"], flush=True)
    (args.folder / "serving.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
