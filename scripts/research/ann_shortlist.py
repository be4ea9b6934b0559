"""Candidates for the embedding side at 100k and 1M tools (issue 23), each beside the exact
float32 scan in one run, on the realistic vectors of scripts/research/ann_vectors.py.

Per size: the exact float32 top 10 of every query (the truth, BLAS over chunks); the exact
scan of the float16 store (``ann.Store``, faiss's flat fp16 scan) and of an 8-bit flat index;
then approximate indexes over the same rows, each asked for ``--candidates`` rows that are
rescored exactly from the float16 rows (as ``VectorIndex`` does): IVF with float16 or 8-bit
codes (``nlist`` = 4·√N rounded to a power of two, trained on a seeded sample, ``nprobe``
swept), product quantisation scanned in full (``PQ96x4fs``, ``PQ192x4fs``: SIMD look-ups) and
RaBitQ scanned in full. Recall@10 against the float32 truth; query CPU is thread time, one
thread, one query at a time; build CPU (process) and wall on ``--threads`` threads; the
index's file size.

    python scripts/research/ann_shortlist.py /tmp/ann --sizes 100000 1000000 \
        --out /tmp/vec/shortlist.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from toolcat.search import ann  # noqa: E402

IP = faiss.METRIC_INNER_PRODUCT


def truth_of(x: np.ndarray, queries: np.ndarray, k: int = 10) -> np.ndarray:
    """The exact float32 top ``k`` rows of each query."""
    best_s = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for at in range(0, len(x), 100_000):
        s = queries @ x[at : at + 100_000].T
        i = np.argpartition(-s, k, axis=1)[:, :k]
        best_s = np.concatenate([best_s, np.take_along_axis(s, i, 1)], 1)
        best_i = np.concatenate([best_i, i + at], 1)
        keep = np.argsort(-best_s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_i, keep, 1)
    return best_i


def measured(
    index: Any,
    queries: np.ndarray,
    truth: np.ndarray,
    rows16: np.ndarray,
    count: int,
    **params: Any,
) -> dict[str, Any]:
    """Recall@10 of ``count`` candidates rescored from the float16 rows, and CPU per query."""
    search_params = None
    if "nprobe" in params:
        search_params = faiss.SearchParametersIVF()
        search_params.nprobe = params["nprobe"]
    hits, times = 0, []
    for q, t in zip(queries, truth, strict=True):
        c0 = time.thread_time()
        _, rows = index.search(q[None, :], count, params=search_params)
        r = rows[0][rows[0] >= 0]
        s = rows16[r].astype(np.float32) @ q
        top = r[np.lexsort((r, -s))[:10]]
        times.append(time.thread_time() - c0)
        hits += len(set(top.tolist()) & set(t.tolist()))
    times.sort()
    return {
        "candidates": count,
        **params,
        "recall_at_10": round(hits / truth.size, 4),
        "cpu_p50_ms": round(statistics.median(times) * 1000, 2),
        "cpu_p99_ms": round(times[max(0, int(len(times) * 0.99) - 1)] * 1000, 2),
    }


def file_mb(index: Any) -> float:
    with tempfile.TemporaryDirectory() as folder:
        faiss.write_index(index, f"{folder}/index")
        return round(os.path.getsize(f"{folder}/index") / 1e6, 1)


def built(make: Callable[[], Any], x: np.ndarray, threads: int, train_rows: int) -> dict[str, Any]:
    faiss.omp_set_num_threads(threads)
    t0, c0 = time.perf_counter(), time.process_time()
    index = make()
    if not index.is_trained:
        picked = np.random.default_rng(0).choice(len(x), min(len(x), train_rows), replace=False)
        index.train(x[np.sort(picked)])
    index.add(x)
    out = {"build_wall_s": round(time.perf_counter() - t0, 1)}
    out["build_cpu_s"] = round(time.process_time() - c0, 1)
    faiss.omp_set_num_threads(1)
    return {"index": index, **out, "file_mb": file_mb(index)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    data = np.load(args.folder / "vectors-1000000.npy", mmap_mode="r")
    queries = np.ascontiguousarray(np.load(args.folder / "queries.npy")[: args.queries], "<f4")
    results: list[dict[str, Any]] = [{"load_1min_start": os.getloadavg()[0]}]

    def report(row: dict[str, Any]) -> None:
        print(json.dumps(row), flush=True)
        results.append(row)
        args.out.write_text(json.dumps(results, indent=1))

    for size in args.sizes:
        x = np.ascontiguousarray(data[:size], dtype=np.float32)
        truth = truth_of(x, queries)
        store = ann.Store(size, x.shape[1])
        store.matrix[:] = x
        rows16 = store.matrix
        report(
            {
                "size": size,
                "index": "fp16 store, exact scan",
                **measured(store.index, queries, truth, rows16, 100),
            }
        )
        nlist = 1 << round(float(np.log2(4 * np.sqrt(size))))
        kinds: dict[str, tuple[Callable[[], Any], list[dict[str, Any]]]] = {
            "flat 8-bit, exact scan": (
                lambda: faiss.IndexScalarQuantizer(384, faiss.ScalarQuantizer.QT_8bit, IP),
                [{}],
            ),
            f"IVF{nlist},SQ8": (
                lambda n=nlist: faiss.index_factory(384, f"IVF{n},SQ8", IP),
                [{"nprobe": p} for p in (16, 64, 256)],
            ),
            f"IVF{nlist},SQfp16": (
                lambda n=nlist: faiss.index_factory(384, f"IVF{n},SQfp16", IP),
                [{"nprobe": p} for p in (64, 256)],
            ),
            "RaBitQ fast scan": (lambda: faiss.IndexRaBitQFastScan(384, IP), [{}]),
            "PQ96x4fs": (lambda: faiss.index_factory(384, "PQ96x4fs", IP), [{}]),
            "PQ192x4fs (taken)": (lambda: faiss.index_factory(384, "PQ192x4fs", IP), [{}]),
        }
        for name, (make, sweeps) in kinds.items():
            made = built(make, x, args.threads, max(ann.TRAIN_ROWS, 64 * nlist))
            index = made.pop("index")
            for params in sweeps:
                for count in (100, 300, 1000) if "nprobe" not in params else (300,):
                    row = measured(index, queries, truth, rows16, count, **params)
                    report({"size": size, "index": name, **made, **row})
            del index
        del x, store, rows16
    results.append({"load_1min_end": os.getloadavg()[0]})
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
