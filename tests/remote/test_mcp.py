"""The implementation strings of imported MCP tools, definition hashes, endpoint checks, and
how results come back."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

import mcp.types as types

from toolcat import ImportFailedError, Tool, ToolcatError
from toolcat.remote.mcp import (
    Endpoint,
    RemoteTool,
    RemoteToolError,
    call_result,
    definition_changes,
    definition_digest,
    make_endpoint,
    parse_implementation,
    stdio_environment,
)


@pytest.mark.parametrize(
    ("endpoint", "tool"),
    [
        (Endpoint("stdio", "npx -y server --root '/a b#c'"), "read#file"),
        (Endpoint("http", "https://example.com/mcp?x=1#frag"), "ns.tool/x y"),
        (
            Endpoint(
                "http",
                "https://example.com/mcp",
                headers=(("Authorization", "Bearer ${GITHUB_TOKEN}"), ("X-Odd", "a=b&c#d?e")),
            ),
            "search",
        ),
        (
            Endpoint(
                "stdio",
                "server --flag",
                env=(("API_KEY", "${KEY}"), ("MODE", "a b")),
                cwd="/srv/my server",
            ),
            "t?x",
        ),
    ],
    ids=["stdio", "http", "headers", "env-cwd"],
)
@pytest.mark.parametrize("on_change", ["refuse", "warn"])
def test_implementation_round_trips(endpoint: Endpoint, tool: str, on_change: str) -> None:
    definition = definition_digest({"description": "d", "inputSchema": {"type": "object"}})
    spec = endpoint.implementation(tool, definition=definition, on_change=on_change)  # type: ignore[arg-type]
    assert parse_implementation(spec) == RemoteTool(endpoint, tool, definition, on_change)  # type: ignore[arg-type]
    Tool(name="t", description="d", implementation=spec)  # accepted by the model's check
    assert parse_implementation(endpoint.implementation(tool)) == RemoteTool(endpoint, tool)


def test_references_stay_readable_in_the_implementation() -> None:
    endpoint = Endpoint("http", "https://x/mcp", headers=(("Authorization", "Bearer ${TOKEN}"),))
    spec = endpoint.implementation("t")
    assert "${TOKEN}" in spec and spec.endswith("?header=Authorization%3DBearer%20${TOKEN}")


@pytest.mark.parametrize(
    "spec",
    [
        "mcp+ftp:host#t",
        "mcp+stdio:cmd",
        "mcp+stdio:#t",
        "mcp+http:url#",
        "mcp+stdio:cmd#t?color=red",
        "mcp+stdio:cmd#t?env=NOVALUE",
        "mcp+stdio:cmd#t?on_change=ignore",
    ],
)
def test_malformed_implementations_are_refused(spec: str) -> None:
    with pytest.raises(ImportFailedError, match=r"is not of the form|unknown option|NAME=VALUE"):
        parse_implementation(spec)


def test_definition_changes_name_what_moved() -> None:
    listed = {"name": "t", "description": "Adds.", "inputSchema": {"type": "object"}}
    digest = definition_digest(listed)
    assert definition_changes(digest, listed) == []
    assert definition_changes(digest, {**listed, "title": "ignored", "annotations": {}}) == []
    assert definition_changes(digest, {**listed, "description": "Deletes."}) == ["description"]
    moved = {**listed, "inputSchema": {"type": "object", "properties": {"x": {}}}}
    assert definition_changes(digest, moved) == ["input schema"]
    both = {**moved, "description": "Deletes."}
    assert definition_changes(digest, both) == ["description", "input schema"]
    assert definition_changes(digest, None) == ["removed"]
    # key order and whitespace do not matter: the hash is of canonical JSON
    reordered = {"inputSchema": {"type": "object"}, "description": "Adds.", "name": "t"}
    assert definition_digest(reordered) == digest


@pytest.mark.parametrize(
    ("transport", "target", "options", "message"),
    [
        ("stdio", "  ", {}, "command is empty"),
        ("http", "ftp://host/mcp", {}, "not an http"),
        ("stdio", "srv", {"headers": {"A": "b"}}, "--header is for --mcp-http"),
        ("http", "http://h/mcp", {"env": {"A": "b"}}, "--env and --cwd are for --mcp-stdio"),
        ("http", "http://h/mcp", {"cwd": "/tmp"}, "--env and --cwd are for --mcp-stdio"),
        ("http", "http://h/mcp", {"headers": {"Bad Name": "x"}}, "not a valid HTTP header"),
        ("http", "http://h/mcp", {"headers": {"A": "x\ny"}}, "line breaks"),
        ("stdio", "srv", {"env": {"1X": "x"}}, "not an environment variable name"),
        ("stdio", "srv", {"env": {"X": "a\0b"}}, "NUL"),
    ],
)
def test_endpoints_check_their_options(
    transport: str, target: str, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ToolcatError, match=message):
        make_endpoint(transport, target, **options)  # type: ignore[arg-type]


def test_stdio_servers_get_safe_defaults_and_their_own_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not for the server")
    monkeypatch.setenv("TZ", "Europe/Oslo")
    env = stdio_environment({"MODE": "x", "LANG": "de_DE.UTF-8"})
    assert env == {"TZ": "Europe/Oslo", "LANG": "de_DE.UTF-8", "MODE": "x"} | {
        k: v for k, v in env.items() if k.startswith("LC_") or k in ("LANGUAGE", "TMPDIR")
    }  # the caller's own LANG is overridden by the server's --env
    assert "AWS_SECRET_ACCESS_KEY" not in env


def test_call_results() -> None:
    text = types.TextContent(type="text", text="hello")
    image = types.ImageContent(type="image", data="AAAA", mime_type="image/png")
    assert call_result(types.CallToolResult(content=[text])) == "hello"
    structured = types.CallToolResult(content=[text], structured_content={"a": 1})
    assert call_result(structured) == {"a": 1}
    blocks = call_result(types.CallToolResult(content=[text, image]))
    assert [b["type"] for b in blocks] == ["text", "image"]
    assert blocks[1]["mimeType"] == "image/png"  # the wire's own keys
    with pytest.raises(RemoteToolError, match="hello"):
        call_result(types.CallToolResult(content=[text], is_error=True))
