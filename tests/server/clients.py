"""The SDK 2.x client against ``toolcat serve``: over stdio (a subprocess) or streamable
HTTP, in either era, recording the notifications it receives."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import ROOT, free_port, wait_for_port

LEGACY = "legacy"  # the 2025-11-25 handshake
MODERN = "2026-07-28"
ERAS = [LEGACY, MODERN]
LIST_CHANGED = "notifications/tools/list_changed"


def server_env(tmp: Path, **extra: str) -> dict[str, str]:
    # This tree's src first: the server tested is the one beside these tests, whichever
    # checkout the environment's toolcat was installed from.
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    return {**os.environ, "PYTHONPATH": path, "TOOLCAT_WORKSPACE": str(tmp), **extra}


class Session:
    """A connected SDK ``Client`` plus the notifications it received."""

    def __init__(self, client: Client, notifications: list[str]) -> None:
        self.client = client
        self.notifications = notifications

    async def all_tools(self) -> list[types.Tool]:
        page = await self.client.list_tools(cache_mode="refresh")
        tools = list(page.tools)
        while page.next_cursor:
            page = await self.client.list_tools(cursor=page.next_cursor, cache_mode="refresh")
            tools += page.tools
        return tools

    async def names(self) -> list[str]:
        return [t.name for t in await self.all_tools()]

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self.client.call_tool(name, arguments or {})

    async def wait_for(self, method: str, seconds: float = 8) -> None:
        with anyio.fail_after(seconds):
            while method not in self.notifications:
                await anyio.sleep(0.02)


def _recorder(notifications: list[str]) -> Any:
    async def handle(message: Any) -> None:
        method = getattr(message, "method", None)
        if isinstance(method, str):
            notifications.append(method)

    return handle


@contextlib.asynccontextmanager
async def _session(transport: Any, mode: str) -> AsyncIterator[Session]:
    notifications: list[str] = []
    async with Client(
        transport,
        mode=mode,
        message_handler=_recorder(notifications),
        cache=None,  # type: ignore[arg-type]
    ) as client:
        yield Session(client, notifications)


@contextlib.asynccontextmanager
async def stdio_session(
    db: Path,
    tmp: Path,
    *serve_args: str,
    mode: str = LEGACY,
    policy: tuple[str, ...] = (),
) -> AsyncIterator[Session]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolcat.cli", "--db", str(db), *policy, "serve", *serve_args],
        env=server_env(tmp),
    )
    with open(tmp / "server-stderr.txt", "a") as errlog:
        async with _session(stdio_client(params, errlog=errlog), mode) as session:
            yield session


@contextlib.asynccontextmanager
async def http_session(
    url: str, token: str | None, *, mode: str = LEGACY
) -> AsyncIterator[Session]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(30, read=300)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        _session(streamable_http_client(url, http_client=http), mode) as session,
    ):
        yield session


@contextlib.contextmanager
def http_server(
    db: Path, tmp: Path, *serve_args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Path]]:
    """``toolcat serve --http`` on a free loopback port: its URL and its stderr file."""
    port = free_port()
    stderr = tmp / f"http-{port}.txt"
    with open(stderr, "w") as errlog:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "toolcat.cli",
                "--db",
                str(db),
                "serve",
                "--http",
                "--port",
                str(port),
                *serve_args,
            ],
            env={**server_env(tmp), **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=errlog,
        )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp", stderr
    finally:
        process.terminate()
        process.wait(10)


def run(test: Any) -> None:
    anyio.run(test)


def error_code(result: types.CallToolResult) -> str:
    assert result.is_error, result.content
    text = result.content[0].text  # type: ignore[union-attr]
    return text.split(":", 1)[0]


def text(result: types.CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr,no-any-return]
