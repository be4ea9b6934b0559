"""Approximate nearest-neighbour libraries from PyPI side by side, on the realistic vectors of
scripts/research/ann_vectors.py (generated tools' vectors made from real ones; real
benchmark queries encoded by the shipped retriever).

Each candidate runs in a fresh child process, one after the other in one run: build on
``--threads`` threads (2: this machine's cores), save, load in a second fresh process, then
answer every query one at a time on one thread. Figures: build wall and process CPU time,
file size, load time, RSS of the loading process (the index alone: VmRSS after loading minus
before), per-query process CPU time p50/p99 (one thread, so process time is the query's
own), and recall@10 against the exact top 10 (a float32 scan of the same vectors) at each
search depth (``ef``) tried.

    python scripts/research/ann_candidates.py VECTORS_DIR --size 100000
    python scripts/research/ann_candidates.py VECTORS_DIR --size 1000000 --only usearch-i8

VECTORS_DIR holds ``vectors-<N>.npy`` and ``queries.npy`` (ann_vectors.py); the first
``--size`` rows are used (the generator's first tools).
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

M = 16  # graph degree, the same for every HNSW candidate
EF_CONSTRUCTION = 128
EFS = (64, 128, 256)
K = 10

CANDIDATES = (
    "voyager-e4m3",
    "voyager-float32",
    "hnswlib",
    "faiss-hnsw",
    "faiss-hnswsq8",
    "usearch-i8",
    "usearch-f16",
)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def vectors(folder: Path, size: int) -> tuple[np.ndarray, np.ndarray]:
    big = sorted(folder.glob("vectors-*.npy"), key=lambda p: int(p.stem.split("-")[1]))
    path = next(p for p in big if int(p.stem.split("-")[1]) >= size)
    data = np.load(path, mmap_mode="r")[:size]
    return np.array(data, dtype=np.float32), np.load(folder / "queries.npy")  # not a memmap


def exact(folder: Path, size: int) -> np.ndarray:
    cached = folder / f"exact-{size}.npy"
    if cached.exists():
        return np.load(cached)
    data, queries = vectors(folder, size)
    top = np.empty((len(queries), K), dtype=np.int64)
    for at in range(0, len(queries), 100):
        scores = queries[at : at + 100] @ data.T
        part = np.argpartition(-scores, K, axis=1)[:, :K]
        order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1)
        top[at : at + 100] = np.take_along_axis(part, order, axis=1)
    np.save(cached, top)
    return top


# -- each library: build(data, threads) -> index; save(index, path); load(path, size);
#    search(index, query, ef) -> ids ------------------------------------------------------


def build(name: str, data: np.ndarray, threads: int) -> Any:
    n, dim = data.shape
    ids = np.arange(n, dtype=np.int64)
    if name == "hnswlib":
        import hnswlib

        index = hnswlib.Index(space="ip", dim=dim)
        index.init_index(max_elements=n, M=M, ef_construction=EF_CONSTRUCTION, random_seed=1)
        index.add_items(data, ids, num_threads=threads)
        return index
    if name.startswith("usearch"):
        from usearch.index import Index

        index = Index(
            ndim=dim,
            metric="ip",
            dtype=name.split("-")[1],
            connectivity=M,
            expansion_add=EF_CONSTRUCTION,
        )
        index.add(ids, data, threads=threads)
        return index
    if name.startswith("faiss"):
        import faiss

        faiss.omp_set_num_threads(threads)
        if name == "faiss-hnswsq8":  # 8-bit scalar quantiser, ranges trained per dimension
            index = faiss.IndexHNSWSQ(
                dim, faiss.ScalarQuantizer.QT_8bit, M, faiss.METRIC_INNER_PRODUCT
            )
            index.train(data)
        else:
            index = faiss.IndexHNSWFlat(dim, M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = EF_CONSTRUCTION
        index.add(data)
        return index
    if name.startswith("voyager"):
        from voyager import Index, Space, StorageDataType

        index = Index(
            Space.InnerProduct,
            num_dimensions=dim,
            M=M,
            ef_construction=EF_CONSTRUCTION,
            random_seed=1,
            max_elements=n,
            storage_data_type={"e4m3": StorageDataType.E4M3, "float32": StorageDataType.Float32}[
                name.split("-")[1]
            ],
        )
        index.add_items(data, ids, num_threads=threads)
        return index
    raise ValueError(name)


def save(name: str, index: Any, path: str) -> None:
    if name.startswith("faiss"):
        import faiss

        faiss.write_index(index, path)
    elif name == "hnswlib":
        index.save_index(path)
    else:
        index.save(path)


def load(name: str, path: str, n: int, dim: int) -> Any:
    if name == "hnswlib":
        import hnswlib

        index = hnswlib.Index(space="ip", dim=dim)
        index.load_index(path, max_elements=n)
        index.set_num_threads(1)
        return index
    if name.startswith("usearch"):
        from usearch.index import Index

        return Index.restore(path)
    if name.startswith("faiss"):
        import faiss

        faiss.omp_set_num_threads(1)
        return faiss.read_index(path)
    if name.startswith("voyager"):
        from voyager import Index

        return Index.load(path)
    raise ValueError(name)


def searcher(name: str, index: Any) -> Any:
    if name == "hnswlib":

        def ask(q: np.ndarray, ef: int) -> np.ndarray:
            index.set_ef(max(ef, K))
            return index.knn_query(q, k=K, num_threads=1)[0][0]

        return ask
    if name.startswith("usearch"):

        def ask(q: np.ndarray, ef: int) -> np.ndarray:
            index.expansion_search = ef
            return index.search(q, K, threads=1).keys

        return ask
    if name.startswith("faiss"):

        def ask(q: np.ndarray, ef: int) -> np.ndarray:
            index.hnsw.efSearch = ef
            return index.search(q[None, :], K)[1][0]

        return ask

    def ask(q: np.ndarray, ef: int) -> np.ndarray:
        return index.query(q, k=K, query_ef=max(ef, K))[0]

    return ask


# -- the child processes --------------------------------------------------------------------


def child_build(name: str, folder: Path, size: int, threads: int, path: str) -> dict[str, Any]:
    data, _ = vectors(folder, size)
    before = rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    index = build(name, data, threads)
    built_wall, built_cpu = time.perf_counter() - t0, time.process_time() - c0
    grown = rss_mb() - before
    t0 = time.perf_counter()
    save(name, index, path)
    return {
        "build_s": round(built_wall, 1),
        "build_cpu_s": round(built_cpu, 1),
        "build_rss_growth_mb": round(grown, 1),
        "save_s": round(time.perf_counter() - t0, 2),
        "file_mb": round(os.path.getsize(path) / 2**20, 1),
    }


def child_query(name: str, folder: Path, size: int, path: str, count: int) -> dict[str, Any]:
    queries = np.load(folder / "queries.npy")[:count]
    truth = exact(folder, size)[:count]
    before = rss_mb()
    t0 = time.perf_counter()
    index = load(name, path, size, queries.shape[1])
    out: dict[str, Any] = {
        "load_s": round(time.perf_counter() - t0, 3),
        "index_rss_mb": round(rss_mb() - before, 1),
    }
    ask = searcher(name, index)
    for q in queries[:20]:  # first-use costs out of the figures
        ask(q, EFS[0])
    for ef in EFS:
        times, hits = [], 0
        for q, true in zip(queries, truth, strict=True):
            c0 = time.process_time()
            found = ask(q, ef)
            times.append(time.process_time() - c0)
            hits += len(set(np.asarray(found).tolist()) & set(true.tolist()))
        times.sort()
        out[f"ef{ef}"] = {
            "recall_at_10": round(hits / (K * len(queries)), 4),
            "cpu_p50_ms": round(statistics.median(times) * 1000, 3),
            "cpu_p99_ms": round(times[int(len(times) * 0.99)] * 1000, 3),
        }
    return out


def exact_scan_figures(folder: Path, size: int) -> dict[str, Any]:
    """The exact scan the index replaces: float32 einsum on the calling thread (as
    ``VectorIndex.search``) and int8 converted a chunk at a time (as bench_scale), per query."""
    data, queries = vectors(folder, size)
    out: dict[str, Any] = {}
    times = []
    for q in queries[:100]:
        c0 = time.process_time()
        scores = np.einsum("ij,j->i", data, q)
        np.argpartition(-scores, K)[:K]
        times.append(time.process_time() - c0)
    out["float32_einsum_cpu_p50_ms"] = round(statistics.median(times) * 1000, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--queries", type=int, default=1000, help="queries asked (of 1,000)")
    parser.add_argument("--only", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, name = args.child
        if kind == "build":
            result = child_build(name, args.folder, args.size, args.threads, args.path)
        elif kind == "query":
            result = child_query(name, args.folder, args.size, args.path, args.queries)
        else:
            result = exact_scan_figures(args.folder, args.size)
        print(json.dumps(result))
        return
    exact(args.folder, args.size)

    def child(kind: str, name: str, path: str) -> dict[str, Any]:
        command = [sys.executable, __file__, str(args.folder), "--size", str(args.size)]
        command += ["--threads", str(args.threads), "--queries", str(args.queries)]
        command += ["--child", kind, name, "--path", path]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            return {"error": done.stderr.strip().splitlines()[-1:]}
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    report: dict[str, Any] = {"size": args.size, "load": os.getloadavg()[0]}
    report["exact"] = child("exact", "-", "-")
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        for name in args.only:
            path = str(Path(tmp) / f"{name}.index")
            found = {"load_before": round(os.getloadavg()[0], 1)}
            found.update(child("build", name, path))
            if "error" not in found:
                found.update(child("query", name, path))
            found["load_after"] = round(os.getloadavg()[0], 1)
            report[name] = found
            print(name, json.dumps(found), flush=True)
            Path(path).unlink(missing_ok=True)
    (args.folder / f"candidates-{args.size}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
