"""Benchmark importing an MCP server: registration, the first forwarded call and warm calls,
each beside the same work done with the MCP SDK 2.x ``Client`` directly.

- register: ``Catalog.register_mcp`` of the test server (``tests/fixtures/mcp_server.py``, stdio,
  7 tools) into a fresh catalog, beside ``Client`` connect + ``list_tools`` + close; median of
  ``--runs``. Both start the server process.
- first call: in a fresh process, the first ``Catalog.call`` of ``shout`` (server start,
  handshake, the rug-pull listing, the call; the SDK's import too) beside importing the SDK,
  connect + ``call_tool`` in another fresh process; median of ``--runs`` processes each.
- warm call: p50/p99 of ``--calls`` calls of ``shout`` through ``Catalog.call`` (validation,
  runtime, loop hop, SDK) beside ``Client.call_tool`` on an open client in an asyncio loop,
  over stdio and over streamable HTTP (the server started on loopback, a bearer header sent).

    python scripts/bench_mcp_import.py [--runs 5] [--calls 300] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.helpers import free_port, wait_for_port  # noqa: E402

from toolcat import Catalog  # noqa: E402
from toolcat.remote.mcp import close_all  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "mcp_server.py"
SERVER = f"{sys.executable} {FIXTURE}"
TOKEN = "bench-token"

FIRST_TOOLCAT = """
import sys, time, json
sys.path.insert(0, {src!r})
from toolcat import Catalog
catalog = Catalog({db!r})
catalog.get("shout")
start = time.perf_counter()
result = catalog.call("shout", {{"text": "a"}})
print(json.dumps(time.perf_counter() - start))
assert result.data == {{"result": "A"}}, result
"""
FIRST_SDK = """
import sys, time, json, asyncio
start = time.perf_counter()  # toolcat imports the SDK on the first call: count it here too
from mcp import Client
from mcp.client.stdio import StdioServerParameters
async def main():
    async with Client(StdioServerParameters(command={python!r}, args=[{fixture!r}])) as client:
        return await client.call_tool("shout", {{"text": "a"}})
result = asyncio.run(main())
print(json.dumps(time.perf_counter() - start))
assert result.structured_content == {{"result": "A"}}, result
"""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def fresh(code: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return float(out.strip().splitlines()[-1])


async def sdk_list(params: Any) -> int:
    from mcp import Client

    async with Client(params) as client:
        return len((await client.list_tools()).tools)


async def sdk_calls(server: Any, calls: int, http_token: str | None = None) -> list[float]:
    from mcp import Client

    if http_token is not None:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {http_token}"})
        server = streamable_http_client(server, http_client=http)
    times = []
    async with Client(server) as client:
        await client.call_tool("shout", {"text": "a"})
        for _ in range(calls):
            start = time.perf_counter()
            await client.call_tool("shout", {"text": "a"})
            times.append(time.perf_counter() - start)
    return times


def toolcat_calls(catalog: Catalog, calls: int) -> list[float]:
    assert catalog.call("shout", {"text": "a"}).success
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        result = catalog.call("shout", {"text": "a"})
        times.append(time.perf_counter() - start)
        assert result.success, result
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=[str(FIXTURE)])
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ours, plain = [], []
        for i in range(args.runs):
            with Catalog(Path(tmp) / f"r{i}.db") as catalog:
                start = time.perf_counter()
                catalog.register_mcp(SERVER, toolkit="weather")
                ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            assert asyncio.run(sdk_list(params)) == 7
            plain.append(time.perf_counter() - start)
        figures["register_ms"] = round(statistics.median(ours) * 1000, 1)
        figures["sdk_list_ms"] = round(statistics.median(plain) * 1000, 1)
        figures["register_ratio"] = round(figures["register_ms"] / figures["sdk_list_ms"], 2)

        db = str(Path(tmp) / "r0.db")
        first_ours = [
            fresh(FIRST_TOOLCAT.format(src=str(ROOT / "src"), db=db)) for _ in range(args.runs)
        ]
        first_sdk = [
            fresh(FIRST_SDK.format(python=sys.executable, fixture=str(FIXTURE)))
            for _ in range(args.runs)
        ]
        figures["first_call_ms"] = round(statistics.median(first_ours) * 1000, 1)
        figures["first_sdk_ms"] = round(statistics.median(first_sdk) * 1000, 1)
        figures["first_ratio"] = round(figures["first_call_ms"] / figures["first_sdk_ms"], 2)

        with Catalog(db) as catalog:
            warm = toolcat_calls(catalog, args.calls)
        close_all()
        direct = asyncio.run(sdk_calls(params, args.calls))
        for name, samples in (("stdio_call", warm), ("stdio_sdk", direct)):
            figures[f"{name}_p50_ms"] = round(percentile(samples, 0.5) * 1000, 3)
            figures[f"{name}_p99_ms"] = round(percentile(samples, 0.99) * 1000, 3)
        figures["stdio_warm_ratio"] = round(
            figures["stdio_call_p50_ms"] / figures["stdio_sdk_p50_ms"], 2
        )

        port = free_port()
        env = {**os.environ, "TOOLCAT_TEST_PORT": str(port), "TOOLCAT_TEST_TOKEN": TOKEN}
        server = subprocess.Popen(
            [sys.executable, str(FIXTURE), "--http"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, server, seconds=60)
            url = f"http://127.0.0.1:{port}/mcp"
            os.environ["BENCH_MCP_TOKEN"] = TOKEN
            with Catalog(Path(tmp) / "http.db") as catalog:
                catalog.register_mcp(
                    url,
                    toolkit="weather",
                    http=True,
                    headers={"Authorization": "Bearer ${BENCH_MCP_TOKEN}"},
                )
                warm = toolcat_calls(catalog, args.calls)
            close_all()
            direct = asyncio.run(sdk_calls(url, args.calls, http_token=TOKEN))
        finally:
            server.terminate()
            server.wait(10)
        for name, samples in (("http_call", warm), ("http_sdk", direct)):
            figures[f"{name}_p50_ms"] = round(percentile(samples, 0.5) * 1000, 3)
            figures[f"{name}_p99_ms"] = round(percentile(samples, 0.99) * 1000, 3)
        figures["http_warm_ratio"] = round(
            figures["http_call_p50_ms"] / figures["http_sdk_p50_ms"], 2
        )
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:<22} {value}")


if __name__ == "__main__":
    main()
