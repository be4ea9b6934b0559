"""Load on the MCP server over HTTP (loopback only, bounded): N concurrent clients x M requests
of tools/list, search_tools and a trivial call, first alone, then beside clients that keep a
deliberately slow tool busy. Reports throughput and p50/p99 of the fast requests.

    python scripts/load_mcp.py [--clients 8] [--requests 60] [--slow 2] [--era 2026-07-28|legacy]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from tests.helpers import SAMPLE_TOOLKITS, free_port, wait_for_port  # noqa: E402

from toolcat import Catalog  # noqa: E402
from toolcat.registry.python import toolkit_from_module  # noqa: E402

MAX_CLIENTS = 64
MAX_REQUESTS = 1000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def client_loop(url: str, mode: str, requests: int, samples: list[float]) -> None:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(60)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client,  # type: ignore[arg-type]
    ):
        for i in range(requests):
            started = time.perf_counter()
            kind = i % 3
            if kind == 0:
                await client.list_tools()
            elif kind == 1:
                await client.call_tool("search_tools", {"query": "convert units", "k": 5})
            else:
                await client.call_tool("call_tool", {"name": "add", "arguments": {"a": 1}})
            samples.append(time.perf_counter() - started)


async def slow_loop(url: str, mode: str, stop: anyio.Event) -> None:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(60)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client,  # type: ignore[arg-type]
    ):
        while not stop.is_set():
            await client.call_tool("call_tool", {"name": "sleeps", "arguments": {"seconds": 2}})


async def round_(url: str, mode: str, clients: int, requests: int, slow: int) -> dict[str, Any]:
    samples: list[float] = []
    stop = anyio.Event()
    started = time.perf_counter()
    async with anyio.create_task_group() as slow_group:
        for _ in range(slow):
            slow_group.start_soon(slow_loop, url, mode, stop)
        if slow:
            await anyio.sleep(0.5)
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(client_loop, url, mode, requests, samples)
        took = time.perf_counter() - started
        stop.set()
    return {
        "slow_clients": slow,
        "requests": len(samples),
        "throughput_rps": round(len(samples) / took, 1),
        "p50_ms": round(pct(samples, 0.5), 2),
        "p99_ms": round(pct(samples, 0.99), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--slow", type=int, default=2)
    parser.add_argument("--era", choices=["2026-07-28", "legacy"], default="2026-07-28")
    args = parser.parse_args()
    clients = max(1, min(args.clients, MAX_CLIENTS))
    requests = max(3, min(args.requests, MAX_REQUESTS))
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "load.db"
        with Catalog(db) as catalog:
            catalog.register(SAMPLE_TOOLKITS, toolkit_from_module("tests.fixtures.tools"))
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "toolcat.cli",
                "--db",
                str(db),
                "serve",
                "--http",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--mode",
                "bm25",
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, process)
            url = f"http://127.0.0.1:{port}/mcp"
            alone = anyio.run(round_, url, args.era, clients, requests, 0)
            beside = anyio.run(round_, url, args.era, clients, requests, args.slow)
        finally:
            process.terminate()
            process.wait(10)
    report = {
        "era": args.era,
        "clients": clients,
        "requests_each": requests,
        "alone": alone,
        "beside_slow": beside,
        "p50_ratio": round(beside["p50_ms"] / alone["p50_ms"], 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
