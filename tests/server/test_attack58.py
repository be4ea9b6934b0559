"""attack58: learning from use in ``toolcat serve --http`` (server/usage.py).

A 2026 request's caller, for the memory of recent searches, is its principal *and* the
``clientInfo`` name the client sends: client text. The memory keeps ``MAX_CALLERS`` such
callers in one pool shared by every principal, and each query whole."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

import mcp.types as types
from mcp import Client

from tests.server import test_usage
from tests.server.clients import MODERN, http_server, http_session, run
from toolcat.server.usage import MAX_CALLERS

CONVERT = "how many miles is 5 km"
TOKENS_YAML = """\
principals:
  - name: attacker
    token: attacker-token
    toolkits: [math]
  - name: victim
    token: victim-token
    toolkits: [math]
"""


db = test_usage.db  # the sample catalog, the same fixture
recorded = test_usage.recorded


async def _raw_search(url: str, token: str, client_name: str, query: str) -> None:
    """One stateless 2026 search_tools request whose clientInfo names ``client_name``."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=MODERN,
            client_info=types.Implementation(name=client_name, version="1"),
            cache=None,  # type: ignore[arg-type]
        ) as client,
    ):
        result = await client.call_tool("search_tools", {"query": query, "k": 1})
        assert not result.is_error, result.content


def _victims_use_after(db: Path, tmp_path: Path, flood: int) -> list[tuple[str, str]]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    with http_server(db, tmp_path, "--tokens", str(tokens)) as (url, _stderr):

        async def check() -> None:
            async with http_session(url, "victim-token", mode=MODERN) as victim:
                found = await victim.call("search_tools", {"query": CONVERT})
                assert "convert_units" in [t["name"] for t in found.structured_content["tools"]]
                # The attacker: MAX_CALLERS + 1 searches, each under a client name of its own.
                sem = anyio.Semaphore(8)

                async def one(i: int) -> None:
                    async with sem:
                        await _raw_search(url, "attacker-token", f"c{i}", "prime factors")

                async with anyio.create_task_group() as tg:
                    for i in range(flood):
                        tg.start_soon(one, i)
                ok = await victim.call(
                    "call_tool",
                    {
                        "name": "convert_units",
                        "arguments": {"value": 5, "from_unit": "km", "to_unit": "mi"},
                    },
                )
                assert not ok.is_error, ok.content

        run(check)
    return recorded(db)


def test_a_few_other_callers_leave_the_victims_use_recorded(db: Path, tmp_path: Path) -> None:
    """The control: the victim's search, then its call, is recorded."""
    assert (CONVERT, "math.convert_units") in _victims_use_after(db, tmp_path, 10)


@pytest.mark.slow
def test_one_principal_cannot_evict_anothers_recent_searches(db: Path, tmp_path: Path) -> None:
    assert (CONVERT, "math.convert_units") in _victims_use_after(db, tmp_path, MAX_CALLERS + 1)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_recent_searches_do_not_pin_whole_queries(db: Path, tmp_path: Path) -> None:
    grown = _growth(db, tmp_path, "prime factors ")
    # Learning keeps a few hundred characters of a query; 60 searches may not pin 180 MB.
    assert grown < 60, f"the server grew by {grown:.0f} MB"


@pytest.mark.slow
def test_searches_that_find_nothing_pin_nothing(db: Path, tmp_path: Path) -> None:
    """The control: the same requests finding no tool (nothing remembered) leave the server
    as it was, so the growth above is the memory of recent searches."""
    grown = _growth(db, tmp_path, "qqzzxv ")
    assert grown < 60, f"the server grew by {grown:.0f} MB"


def _growth(db: Path, tmp_path: Path, head: str) -> float:
    import subprocess
    import sys

    from tests.helpers import free_port, wait_for_port
    from tests.server.clients import server_env

    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    port = free_port()
    with open(tmp_path / "stderr.txt", "w") as errlog:
        process = subprocess.Popen(
            [sys.executable, "-m", "toolcat.cli", "--db", str(db), "serve", "--http",
             "--port", str(port), "--tokens", str(tokens)],
            env=server_env(tmp_path), stdout=subprocess.DEVNULL, stderr=errlog,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for_port(port, process)

        async def searches(count: int, size: int) -> None:
            for i in range(count):
                # A query that finds a tool (so it is remembered for learning), padded.
                query = head + f"pad{i} " * (size // 7)
                await _raw_search(url, "attacker-token", f"client-{i}", query)

        run(lambda: searches(5, 1000))  # warm: imports, readers, indexes
        before = _rss_mb(process.pid)
        run(lambda: searches(60, 3_000_000))
        grown = _rss_mb(process.pid) - before
    finally:
        process.terminate()
        process.wait(10)
    return grown
