"""Benchmark the MCP server: tools/list, search_tools and a trivial tools/call over stdio,
in both protocol eras (2025-11-25 sessions and 2026-07-28 stateless), beside the same
operations through the Python API (the protocol's overhead as a ratio).

The workload is seeded: a catalog of benchmark tools (from ../shared/bench, as in
bench_catalog.py) plus the test fixtures' trivial ``add``; the server is ``toolcat serve`` in
a subprocess, driven by the MCP SDK's client.

    python scripts/bench_mcp.py [--tools 1000] [--runs 300] [--json]

``--metrics`` measures instead what Prometheus metrics cost (docs/observability.md): the same
operations against the server in-process (the SDK's in-memory transport, 2026-07-28), with
and without the ``/metrics`` recorder attached, interleaved, as a ratio of p50s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from bench_catalog import SEED, make_toolkits, percentiles, tool_pool  # noqa: E402
from toolcat import Catalog, Toolkit  # noqa: E402
from toolcat.registry.python import toolkit_from_module  # noqa: E402

PAGE = 100
K = 5


def build(db: str, size: int) -> list[str]:
    pool, queries = tool_pool()
    with Catalog(db) as catalog:
        catalog.register(
            *[Toolkit.model_validate(t) for t in make_toolkits(pool, size)],
            toolkit_from_module("tests.fixtures.tools"),
        )
    return queries


def python_side(db: str, queries: list[str], runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"tools/list": [], "search_tools": [], "tools/call": []}
    with Catalog(db) as catalog:
        catalog.list(limit=PAGE)
        catalog.call("add", {"a": 1, "b": 2})
        for i in range(runs):
            start = time.perf_counter()
            catalog.list(limit=PAGE)
            samples["tools/list"].append(time.perf_counter() - start)
            start = time.perf_counter()
            catalog.search(queries[i % len(queries)], k=K, mode="bm25")
            samples["search_tools"].append(time.perf_counter() - start)
            start = time.perf_counter()
            catalog.call("add", {"a": 1, "b": 2})
            samples["tools/call"].append(time.perf_counter() - start)
    return samples


async def timed(operation: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await operation()
    return time.perf_counter() - start


async def mcp_side(db: str, queries: list[str], runs: int, mode: str) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"tools/list": [], "search_tools": [], "tools/call": []}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolcat.cli", "--db", db, "serve", "--mode", "bm25", "--page-size", str(PAGE)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    async with Client(params, mode=mode, cache=None) as client:  # type: ignore[arg-type]
        await client.list_tools()
        await client.call_tool("add", {"a": 1, "b": 2})
        for i in range(runs):
            query = queries[i % len(queries)]
            samples["tools/list"].append(await timed(client.list_tools))
            samples["search_tools"].append(
                await timed(lambda q=query: client.call_tool("search_tools", {"query": q, "k": K}))
            )
            result_time = await timed(lambda: client.call_tool("add", {"a": 1, "b": 2}))
            samples["tools/call"].append(result_time)
    return samples


ERAS = {"2025-11-25": "legacy", "2026-07-28": "2026-07-28"}


async def metrics_side(db: str, queries: list[str], runs: int) -> dict[str, Any]:
    """p50/p99 per operation with metrics off and on (two servers, requests interleaved)."""
    from toolcat.server.mcp import CatalogServer, ServeOptions
    from toolcat.server.metrics import Metrics

    samples: dict[str, dict[str, list[float]]] = {}
    with Catalog(db) as catalog:
        servers = {
            on: CatalogServer(catalog, ServeOptions(search_mode="bm25", page_size=PAGE))
            for on in ("off", "on")
        }
        metrics = Metrics(servers["on"])
        servers["on"].telemetry.sinks.append(metrics.record)
        async with (
            Client(servers["off"].server, mode="2026-07-28") as off,
            Client(servers["on"].server, mode="2026-07-28") as on,
        ):
            for name, client in (("off", off), ("on", on)):
                await client.list_tools()
                await client.call_tool("add", {"a": 1, "b": 2})
                samples[name] = {"tools/list": [], "search_tools": [], "tools/call": []}
            for i in range(runs):
                query = queries[i % len(queries)]
                for name, client in (("off", off), ("on", on)):
                    got = samples[name]
                    got["tools/list"].append(
                        await timed(lambda c=client: c.list_tools(cache_mode="refresh"))
                    )
                    got["search_tools"].append(
                        await timed(
                            lambda c=client, q=query: c.call_tool(
                                "search_tools", {"query": q, "k": K}
                            )
                        )
                    )
                    got["tools/call"].append(
                        await timed(lambda c=client: c.call_tool("add", {"a": 1, "b": 2}))
                    )
        scrape = await timed(lambda: anyio.to_thread.run_sync(metrics.exposition))
        for server in servers.values():
            server.close()
    report: dict[str, Any] = {"scrape_ms": round(scrape * 1000, 3), "operations": {}}
    for operation in samples["off"]:
        off_p, on_p = percentiles(samples["off"][operation]), percentiles(samples["on"][operation])
        report["operations"][operation] = {
            "metrics_off": off_p,
            "metrics_on": on_p,
            "ratio_p50": round(on_p["p50_ms"] / off_p["p50_ms"], 3),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--metrics", action="store_true", help="Metrics on vs off, in-process.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "mcp.db")
        queries = build(db, args.tools)
        random.Random(SEED).shuffle(queries)
        if args.metrics:
            print(json.dumps(anyio.run(metrics_side, db, queries, args.runs), indent=2))
            return
        direct = python_side(db, queries, args.runs)
        served = {
            era: anyio.run(mcp_side, db, queries, args.runs, mode) for era, mode in ERAS.items()
        }
    report: dict[str, Any] = {"tools": args.tools, "runs": args.runs, "operations": {}}
    for era in ERAS:
        for operation in direct:
            api, mcp = percentiles(direct[operation]), percentiles(served[era][operation])
            report["operations"][f"{operation} {era}"] = {
                "python_api": api,
                "mcp_stdio": mcp,
                "ratio_p50": round(mcp["p50_ms"] / api["p50_ms"], 1),
            }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.tools} benchmark tools + fixtures, {args.runs} runs each, stdio, bm25")
    print(f"{'operation':<26}{'Python API p50/p99 ms':>24}{'MCP stdio p50/p99 ms':>24}{'ratio':>8}")
    for operation, row in report["operations"].items():
        api, mcp = row["python_api"], row["mcp_stdio"]
        print(
            f"{operation:<26}{api['p50_ms']:>12.3f} / {api['p99_ms']:<9.3f}"
            f"{mcp['p50_ms']:>12.3f} / {mcp['p99_ms']:<9.3f}{row['ratio_p50']:>7}x"
        )


if __name__ == "__main__":
    main()
