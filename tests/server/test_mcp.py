"""``toolcat serve`` driven by the MCP SDK's real client: over stdio (a subprocess) and over
streamable HTTP on loopback."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("mcp")

import mcp.types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import ROOT, SAMPLE_TOOLKITS, free_port, table_snapshot, wait_for_port
from toolcat import Catalog, Toolkit
from toolcat.registry.python import toolkit_from_module

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def served_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sample toolkits (some tools deferred) + the runtime fixtures, all deferred, + a tool
    whose module fails to import."""
    db = tmp_path_factory.mktemp("serve") / "catalog.db"
    fixtures = toolkit_from_module("tests.fixtures.tools")
    broken = Toolkit.model_validate(
        {
            "toolkit": "broken",
            "version": "1.0.0",
            "defer_loading": True,
            "tools": [
                {
                    "name": "broken_tool",
                    "description": "A tool whose module cannot be imported.",
                    "implementation": "tests.fixtures.broken_import:anything",
                }
            ],
        }
    )
    with Catalog(db) as catalog:
        catalog.register(
            SAMPLE_TOOLKITS, fixtures.model_copy(update={"defer_loading": True}), broken
        )
    return db


def server_env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TOOLCAT_WORKSPACE": str(tmp),
    }


class Client:
    """An SDK client session plus the notifications it received."""

    def __init__(self, session: ClientSession, notifications: list[str]) -> None:
        self.session = session
        self.notifications = notifications

    async def all_tools(self) -> list[types.Tool]:
        page = await self.session.list_tools()
        tools = list(page.tools)
        while page.nextCursor:
            page = await self.session.list_tools(cursor=page.nextCursor)
            tools += page.tools
        return tools

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self.session.call_tool(name, arguments or {})


def recorder(notifications: list[str]) -> Any:
    async def handle(message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            notifications.append(message.root.method)

    return handle


@contextlib.asynccontextmanager
async def stdio_client_for(
    db: Path, tmp: Path, *serve_args: str, policy: tuple[str, ...] = ()
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolcat.cli", "--db", str(db), *policy, "serve", *serve_args],
        env=server_env(tmp),
    )
    notifications: list[str] = []
    handler = recorder(notifications)
    with open(tmp / "server-stderr.txt", "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, message_handler=handler) as session,
        ):
            await session.initialize()
            yield Client(session, notifications)


def run(test: Any) -> None:
    anyio.run(test)


def error_code(result: types.CallToolResult) -> str:
    assert result.isError
    text = result.content[0].text  # type: ignore[union-attr]
    return text.split(":", 1)[0]


# -- stdio ------------------------------------------------------------------------------------


def test_list_is_list_mode_paginated_with_own_tools(served_db: Path, tmp_path: Path) -> None:
    with Catalog(served_db) as catalog:
        listed = catalog.list(limit=1000).tools

    async def check() -> None:
        async with stdio_client_for(served_db, tmp_path, "--page-size", "5") as client:
            first = await client.session.list_tools()
            assert [t.name for t in first.tools[:2]] == ["search_tools", "call_tool"]
            assert len(first.tools) == 7 and first.nextCursor
            tools = await client.all_tools()
            names = [t.name for t in tools]
            assert names == ["search_tools", "call_tool", *[t.name for t in listed]]
            by_name = {t.name: t for t in tools}
            read_file = by_name["read_file"]
            assert read_file.annotations is not None and read_file.annotations.readOnlyHint
            assert "path" in read_file.inputSchema["properties"]
            assert read_file.meta == {"toolcat/id": "files.read_file", "toolcat/version": "1.0.0"}
            assert "delete_file" not in names  # deferred
            again = await client.session.list_tools()  # no cursor: the first page again
            assert again.tools[0].name == "search_tools"

    run(check)


def test_search_reveals_deferred_tools_and_both_call_paths_work(
    served_db: Path, tmp_path: Path
) -> None:
    (tmp_path / "old.txt").write_text("bye")

    async def check() -> None:
        async with stdio_client_for(served_db, tmp_path) as client:
            before = {t.name for t in await client.all_tools()}
            result = await client.call("search_tools", {"query": "delete a file", "k": 3})
            assert not result.isError
            found = result.structuredContent["tools"]  # type: ignore[index]
            assert found[0]["name"] == "delete_file"
            assert found[0]["inputSchema"]["required"] == ["path"]
            with anyio.fail_after(5):
                while "notifications/tools/list_changed" not in client.notifications:
                    await anyio.sleep(0.01)
            after = {t.name for t in await client.all_tools()}
            assert "delete_file" in after - before
            # direct call of the revealed tool
            deleted = await client.call("delete_file", {"path": "old.txt"})
            assert not deleted.isError, deleted.content
            assert not (tmp_path / "old.txt").exists()
            # through call_tool, for clients that never refresh their list
            (tmp_path / "again.txt").write_text("x")
            again = await client.call(
                "call_tool", {"name": "delete_file", "arguments": {"path": "again.txt"}}
            )
            assert not again.isError and not (tmp_path / "again.txt").exists()
            # the same search again reveals nothing new: no second notification
            count = client.notifications.count("notifications/tools/list_changed")
            await client.call("search_tools", {"query": "delete a file", "k": 3})
            await client.call("search_tools", {"query": "now"})  # a listed tool: no change
            assert client.notifications.count("notifications/tools/list_changed") == count

    run(check)


def test_structured_results_and_annotations(served_db: Path, tmp_path: Path) -> None:
    async def check() -> None:
        async with stdio_client_for(served_db, tmp_path) as client:
            converted = await client.call(
                "call_tool",
                {
                    "name": "convert_timezone",
                    "arguments": {
                        "datetime": "2026-03-29T09:30",
                        "from_timezone": "Europe/Paris",
                        "to_timezone": "UTC",
                    },
                },
            )
            assert not converted.isError, converted.content
            assert converted.structuredContent is not None
            assert converted.structuredContent["datetime"].startswith("2026-03-29T07:30")
            plain = await client.call("call_tool", {"name": "add", "arguments": {"a": 2}})
            assert not plain.isError and plain.content[0].text == "4"  # type: ignore[union-attr]
            assert plain.structuredContent is None  # no output schema

    run(check)


def test_every_error_code_is_a_result_and_the_server_keeps_serving(
    served_db: Path, tmp_path: Path
) -> None:
    before = table_snapshot(served_db)

    async def check() -> None:
        async with stdio_client_for(served_db, tmp_path) as client:
            cases: list[tuple[str, dict[str, Any], str, str]] = [
                ("no_such_tool", {}, "UNKNOWN_TOOL", "unknown tool"),
                ("add", {"a": "one"}, "INVALID_ARGUMENTS", "must be integer"),
                ("add", {"a": 1, "zzz": 2}, "INVALID_ARGUMENTS", "unknown argument"),
                ("add", {"a": "x" * 1_100_000}, "INVALID_ARGUMENTS", "bytes of JSON"),
                ("fails", {"message": "kaput"}, "TOOL_ERROR", "kaput"),
                ("broken_tool", {}, "IMPORT_FAILED", "broken on purpose"),
                ("call_tool", {"name": 3}, "INVALID_ARGUMENTS", "call_tool takes"),
                ("search_tools", {"query": ""}, "INVALID_ARGUMENTS", "non-empty"),
                ("search_tools", {"query": "x", "k": 500}, "INVALID_ARGUMENTS", "'k'"),
            ]
            for name, arguments, code, text in cases:
                result = await client.call(name, arguments)
                assert error_code(result) == code, (name, result.content)
                assert text in result.content[0].text, result.content  # type: ignore[union-attr]
                assert result.meta == {"toolcat/error_code": code}
            slow = await client.call("call_tool", {"name": "sleeps", "arguments": {"seconds": 3}})
            assert not slow.isError  # sleeps' own timeout is longer than 3 s
            ok = await client.call("add", {"a": 1, "b": 1})
            assert ok.content[0].text == "2"  # type: ignore[union-attr]
            odd = await client.call("search_tools", {"query": '")(*&^%$ OR NOT ~~~'})
            assert not odd.isError

    run(check)
    assert table_snapshot(served_db) == before


def test_policy_denies_through_the_server(served_db: Path, tmp_path: Path) -> None:
    async def check() -> None:
        async with stdio_client_for(served_db, tmp_path, policy=("--deny", "tag:math")) as client:
            result = await client.call("prime_factors", {"n": 12})
            assert error_code(result) == "TOOL_DENIED"
            assert "prime_factors" not in {t.name for t in await client.all_tools()}
            allowed = await client.call("word_stats", {"text": "a b c"})
            assert not allowed.isError

    run(check)


def test_refuse_unsearched(served_db: Path, tmp_path: Path) -> None:
    async def check() -> None:
        async with stdio_client_for(served_db, tmp_path, "--refuse-unsearched") as client:
            refused = await client.call("add", {"a": 1})
            assert error_code(refused) == "TOOL_DENIED"
            assert "search_tools first" in refused.content[0].text  # type: ignore[union-attr]
            listed = await client.call("word_stats", {"text": "a b"})
            assert not listed.isError  # list-mode tools need no search
            await client.call("search_tools", {"query": "add two numbers"})
            allowed = await client.call("add", {"a": 1})
            assert not allowed.isError and allowed.content[0].text == "3"  # type: ignore[union-attr]

    run(check)


# -- HTTP -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_server(served_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("http")
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolcat.cli",
            "--db",
            str(served_db),
            "serve",
            "--http",
            "--port",
            str(port),
        ],
        env={**server_env(tmp), "TOOLCAT_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for_port(port, process)
        yield url
    finally:
        process.terminate()
        process.wait(10)


@contextlib.asynccontextmanager
async def http_client_for(url: str, token: str = TOKEN) -> AsyncIterator[Client]:
    notifications: list[str] = []
    handler = recorder(notifications)
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write, message_handler=handler) as session,
    ):
        await session.initialize()
        yield Client(session, notifications)


def test_http_list_search_call(http_server: str) -> None:
    async def check() -> None:
        async with http_client_for(http_server) as client:
            tools = await client.all_tools()
            assert tools[0].name == "search_tools" and "read_file" in {t.name for t in tools}
            found = await client.call("search_tools", {"query": "add two numbers", "k": 2})
            assert found.structuredContent["tools"][0]["name"] == "add"  # type: ignore[index]
            with anyio.fail_after(5):
                while "notifications/tools/list_changed" not in client.notifications:
                    await anyio.sleep(0.01)
            assert "add" in {t.name for t in await client.all_tools()}
            direct = await client.call("add", {"a": 20, "b": 22})
            assert direct.content[0].text == "42"  # type: ignore[union-attr]
            via = await client.call("call_tool", {"name": "add", "arguments": {"a": 1}})
            assert via.content[0].text == "3"  # type: ignore[union-attr]
            unknown = await client.call("nope", {})
            assert error_code(unknown) == "UNKNOWN_TOOL"
        async with http_client_for(http_server) as other:  # a new session: nothing revealed
            assert "add" not in {t.name for t in await other.all_tools()}

    run(check)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}],
    ids=["none", "wrong", "not-bearer"],
)
def test_http_refuses_requests_without_the_token(http_server: str, headers: dict[str, str]) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx.post(
        http_server,
        json=body,
        headers={**headers, "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_http_client_with_wrong_token_fails_cleanly(http_server: str) -> None:
    async def check() -> None:
        async with http_client_for(http_server, token="wrong") as client:
            del client

    with pytest.raises(BaseException) as raised:
        run(check)
    assert "401" in repr(raised.value) or "Unauthorized" in repr(raised.value)


def test_plain_serves_every_selected_tool_and_no_search(served_db: Path, tmp_path: Path) -> None:
    with Catalog(served_db) as catalog:
        math_tools = catalog.list(toolkit="math", include_deferred=True).tools

    async def check() -> None:
        async with stdio_client_for(served_db, tmp_path, "--plain", "--toolkit", "math") as client:
            names = [t.name for t in await client.all_tools()]
            assert names == [t.name for t in math_tools]
            assert any(t.defer_loading for t in math_tools)  # deferred ones are listed too
            refused = await client.call("search_tools", {"query": "x"})
            assert error_code(refused) == "UNKNOWN_TOOL"
            factors = await client.call("prime_factors", {"n": 12})
            assert not factors.isError

    run(check)
