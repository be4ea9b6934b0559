"""A request holding a lone surrogate escape (``"\\ud800"``) is answered with a tool result,
over stdio and HTTP, in both eras: before, the SDK's parser refused it whole (parse error)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx as httpx2
import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import MODERN, http_server, server_env
from toolcat import Catalog
from toolcat.server.wire import repair

pytest.importorskip("mcp")

QUERY = "read a file \\ud800 and \\udc00\\u00e9 \\ud83d\\ude00"  # as JSON text: 2 lone, 1 pair


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (rb'"\ud800"', rb'"\ufffd"'),
        (rb'"\uDBFF x"', rb'"\ufffd x"'),
        (rb'"\udc00"', rb'"\ufffd"'),
        (rb'"\ud83d\ude00"', rb'"\ud83d\ude00"'),  # a pair: one character, kept
        (rb'"\ud83d\ud83d\ude00"', rb'"\ufffd\ud83d\ude00"'),
        (rb'"\\ud800"', rb'"\\ud800"'),  # an escaped backslash, then plain text
        (rb'"\\\ud800"', rb'"\\\ufffd"'),
        (rb'"\u00e9 plain"', rb'"\u00e9 plain"'),
    ],
)
def test_repair(raw: bytes, expected: bytes) -> None:
    assert repair(raw) == expected and len(repair(raw)) == len(raw)
    json.loads(repair(raw).decode()).encode("utf-8")  # valid text now


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wire") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return path


def call_line(request_id: int, meta: dict[str, Any] | None = None) -> str:
    params = f'"name": "search_tools", "arguments": {{"query": "{QUERY}", "k": 3}}'
    if meta is not None:
        params += f', "_meta": {json.dumps(meta)}'
    head = f'"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call"'
    return f'{{{head}, "params": {{{params}}}}}'


def assert_tool_result(reply: dict[str, Any]) -> None:
    assert "error" not in reply, reply
    result = reply["result"]
    assert not result.get("isError"), result
    assert '"toolkit": "files"' in json.dumps(result)  # the search ran, found file tools


def test_stdio(db: Path, tmp_path: Path) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    lines = [
        json.dumps(initialize),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        call_line(2),
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "toolcat", "--db", str(db), "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=server_env(tmp_path),
    )
    assert server.stdin is not None and server.stdout is not None
    watchdog = threading.Timer(60, server.kill)  # a request never answered fails, not hangs
    watchdog.start()
    try:
        server.stdin.write("\n".join(lines) + "\n")
        server.stdin.flush()
        replies: dict[Any, Any] = {}
        while 2 not in replies:  # the server answers each request on a line of its own
            line = server.stdout.readline()
            assert line, "the server stopped before answering"
            reply = json.loads(line)
            replies[reply.get("id")] = reply
    finally:
        watchdog.cancel()
        server.kill()
        server.wait(10)
        server.stdin.close()
        server.stdout.close()
    assert_tool_result(replies[2])


def test_http_2026(db: Path, tmp_path: Path) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    with http_server(db, tmp_path) as (url, _stderr):
        response = httpx2.post(
            url,
            content=call_line(7, meta).encode(),
            headers={
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                "MCP-Protocol-Version": MODERN,
                "Mcp-Method": "tools/call",
                "Mcp-Name": "search_tools",
            },
            timeout=60,
        )
    body = response.text
    if body.startswith("event:") or "\ndata: " in body or body.startswith("data: "):
        body = next(line[6:] for line in body.splitlines() if line.startswith("data: "))
    assert_tool_result(json.loads(body))
