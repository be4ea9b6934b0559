"""The implementation strings of imported MCP tools, and how results come back."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

import mcp.types as types

from toolcat import ImportFailedError, Tool
from toolcat.mcpclient import (
    Endpoint,
    RemoteToolError,
    call_result,
    parse_implementation,
)


@pytest.mark.parametrize(
    ("endpoint", "tool"),
    [
        (Endpoint("stdio", "npx -y server --root '/a b#c'"), "read#file"),
        (Endpoint("http", "https://example.com/mcp?x=1#frag"), "ns.tool/x y"),
    ],
    ids=["stdio", "http"],
)
def test_implementation_round_trips(endpoint: Endpoint, tool: str) -> None:
    spec = endpoint.implementation(tool)
    assert parse_implementation(spec) == (endpoint, tool)
    Tool(name="t", description="d", implementation=spec)  # accepted by the model's check


@pytest.mark.parametrize(
    "spec", ["mcp+ftp:host#t", "mcp+stdio:cmd", "mcp+stdio:#t", "mcp+http:url#"]
)
def test_malformed_implementations_are_refused(spec: str) -> None:
    with pytest.raises(ImportFailedError, match="is not of the form"):
        parse_implementation(spec)


def test_call_results() -> None:
    text = types.TextContent(type="text", text="hello")
    image = types.ImageContent(type="image", data="AAAA", mimeType="image/png")
    assert call_result(types.CallToolResult(content=[text])) == "hello"
    structured = types.CallToolResult(content=[text], structuredContent={"a": 1})
    assert call_result(structured) == {"a": 1}
    blocks = call_result(types.CallToolResult(content=[text, image]))
    assert [b["type"] for b in blocks] == ["text", "image"]
    with pytest.raises(RemoteToolError, match="hello"):
        call_result(types.CallToolResult(content=[text], isError=True))
