"""The access log against a client that writes what it likes: a method or tool name holding
newlines, carriage returns, ANSI and OSC sequences stays one escaped field of its own line,
in both eras; and a 2026 first call (no ``tools/list`` before it) works and is logged under
its principal."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import MODERN, http_server, http_session, run
from tests.server.test_http import ACCESS_LINE, TOKENS_YAML
from toolcat import Catalog
from toolcat.definitions.printable import escape

TOKEN = "math-team-token-1"
FORGED = "\n2026-01-01T00:00:00.000Z admin-team tools/call files.delete_file ok 0.1ms\n"
HOSTILE = [
    f"tools/list{FORGED}",
    "tools/list\r2026-01-01T00:00:00.000Z admin-team tools/call x ok 0.1ms",
    "tools/list\x1b[2J\x1b[H",  # clear the screen
    "tools/list\x1b]0;pwned\x07\x1b]8;;http://evil.example/\x1b\\",  # OSC: title, link
    "tools/list\u2028\u202eevil",  # a line separator, a bidi override
]
BASE = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MODERN_CALL = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "call_tool"}
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture
def served(tmp_path: Path) -> Any:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    with http_server(db, tmp_path, "--tokens", str(tokens)) as (url, stderr):
        yield url, stderr


def post(url: str, method: str, params: dict[str, Any], **headers: str) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    return httpx2.post(url, content=json.dumps(body), headers={**BASE, **auth, **headers})


def legacy_session(url: str) -> str:
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    }
    session = post(url, "initialize", init).headers["mcp-session-id"]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    headers = {**BASE, "Authorization": f"Bearer {TOKEN}", "Mcp-Session-Id": session}
    httpx2.post(url, content=json.dumps(done), headers=headers)
    return session


def log_of(stderr: Path) -> tuple[str, list[tuple[str, str, str]]]:
    text = stderr.read_text()
    lines = []
    for line in text.splitlines():
        match = ACCESS_LINE.match(line)
        if match:
            lines.append((match.group(1), match.group(2), match.group(3)))
    return text, lines


def test_hostile_methods_and_tool_names_stay_one_escaped_field(served: Any) -> None:
    url, stderr = served
    legacy = {"Mcp-Session-Id": legacy_session(url)}
    for method in HOSTILE:
        post(url, method, {}, **legacy)  # a 2025 session: any method reaches the server
        call = {"name": "call_tool", "arguments": {"name": method.replace("tools/list", "x")}}
        post(url, "tools/call", call, **legacy)
        post(url, "tools/call", {"name": method.replace("tools/list", "y")}, **legacy)
        # 2026: the method and the name travel in headers too, so the body's inner name
        # (no Mcp-Param-Tool header sent) is where a client's own text goes.
        post(url, "tools/call", {**call, "_meta": ENVELOPE}, **MODERN_CALL)
    text, lines = log_of(stderr)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\r" not in text and "\u2028" not in text
    assert "admin-team" in text  # the text is there, escaped, inside the client's own field
    assert {who for who, *_ in lines} == {"math-team"}, lines
    assert not any(line.startswith("2026-01-01") for line in text.splitlines())
    for method in HOSTILE:
        assert sum(what == escape(method, 80) for _, what, _ in lines) == 1, method
        tool = escape("call_tool:" + method.replace("tools/list", "x"), 80)
        assert sum(what == f"tools/call {tool}" for _, what, _ in lines) == 2, method
        direct = escape(method.replace("tools/list", "y"), 80)
        assert sum(what == f"tools/call {direct}" for _, what, _ in lines) == 1, method


def test_a_first_modern_call_works_without_a_list_and_names_its_principal(served: Any) -> None:
    url, stderr = served
    arguments = {"value": 1, "from_unit": "km", "to_unit": "m"}
    call = {"name": "call_tool", "arguments": {"name": "convert_units", "arguments": arguments}}
    raw = post(url, "tools/call", {**call, "_meta": ENVELOPE}, **MODERN_CALL)
    assert raw.status_code == 200, raw.text
    assert "1000" in raw.text

    async def check() -> None:  # the SDK client, calling before it ever listed
        async with http_session(url, TOKEN, mode=MODERN) as s:
            result = await s.call("call_tool", {"name": "convert_units", "arguments": arguments})
            assert not result.is_error, result.content

    run(check)
    # A header that is sent must still match the body it stands for.
    lying = post(
        url,
        "tools/call",
        {**call, "_meta": ENVELOPE},
        **{**MODERN_CALL, "Mcp-Param-Tool": "math.add"},
    )
    assert lying.status_code == 400
    deadline = time.monotonic() + 10  # the line is written as the response ends: a loaded
    _, lines = log_of(stderr)  # machine may show the client its answer first
    while not any(line[2] == "400" for line in lines) and time.monotonic() < deadline:
        time.sleep(0.05)
        _, lines = log_of(stderr)
    assert ("math-team", "tools/call call_tool:convert_units", "ok") in lines
    assert [line for line in lines if line[2] == "400"] == [("math-team", "POST /mcp", "400")]
