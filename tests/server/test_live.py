"""The server while the catalog and other clients move: list changes announced in both eras,
per-team views over HTTP, and a slow call beside fast ones."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import (
    LEGACY,
    LIST_CHANGED,
    MODERN,
    error_code,
    http_server,
    http_session,
    run,
    stdio_session,
    text,
)
from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module


@pytest.fixture
def live_db(tmp_path: Path) -> Path:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS, toolkit_from_module("tests.fixtures.tools"))
    return db


def register_elsewhere(db: Path) -> None:
    """Another process's change: a new toolkit version, written through its own catalog."""
    with Catalog(db) as catalog:
        catalog.remove("math")


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
def test_stdio_announces_catalog_changes(live_db: Path, tmp_path: Path, mode: str) -> None:
    async def check() -> None:
        async with stdio_session(live_db, tmp_path, mode=mode) as s:
            before = await s.names()
            assert "convert_units" in before
            if mode == MODERN:
                async with s.client.listen(tools_list_changed=True) as sub:
                    started = time.monotonic()
                    await anyio.to_thread.run_sync(register_elsewhere, live_db)
                    with anyio.fail_after(8):
                        event = await sub.__anext__()
                    assert type(event).__name__ == "ToolsListChanged"
            else:
                started = time.monotonic()
                await anyio.to_thread.run_sync(register_elsewhere, live_db)
                await s.wait_for(LIST_CHANGED)
            assert time.monotonic() - started < 5
            assert "convert_units" not in await s.names()

    run(check)


def test_http_both_eras_hear_a_change_from_another_process(live_db: Path, tmp_path: Path) -> None:
    with http_server(live_db, tmp_path) as (url, stderr):

        async def check() -> None:
            async with (
                http_session(url, None, mode=LEGACY) as legacy,
                http_session(url, None, mode=MODERN) as modern,
                modern.client.listen(tools_list_changed=True) as sub,
            ):
                await legacy.names()
                await anyio.sleep(0.5)  # the legacy client's standalone stream opens
                await anyio.to_thread.run_sync(register_elsewhere, live_db)
                with anyio.fail_after(8):
                    event = await sub.__anext__()
                assert type(event).__name__ == "ToolsListChanged"
                await legacy.wait_for(LIST_CHANGED)
                assert "convert_units" not in await modern.names()

        run(check)
        assert "Traceback" not in stderr.read_text()


def test_slow_call_does_not_delay_other_clients(live_db: Path, tmp_path: Path) -> None:
    with http_server(live_db, tmp_path) as (url, _stderr):

        async def check() -> None:
            async with (
                http_session(url, None, mode=MODERN) as slow,
                http_session(url, None, mode=LEGACY) as fast,
            ):
                await fast.call("add", {"a": 1})  # warm: imports done
                finished: list[float] = []

                async def sleeper() -> None:
                    result = await slow.call("sleeps", {"seconds": 4})
                    assert text(result) == "awake"
                    finished.append(time.monotonic())

                async with anyio.create_task_group() as tg:
                    tg.start_soon(sleeper)
                    await anyio.sleep(0.3)
                    started = time.monotonic()
                    for _ in range(5):
                        assert text(await fast.call("add", {"a": 1})) == "3"
                        await fast.call("search_tools", {"query": "convert units"})
                    took = time.monotonic() - started
                    assert not finished  # the slow call was still running
                assert took < 2.0, f"fast calls took {took:.2f} s beside a slow one"

        run(check)


TOKENS_YAML = """\
principals:
  - name: math-team
    token: ${MATH_TOKEN}
    toolkits: [math]
  - name: files-team
    token: files-team-token
    toolkits: [files]
    deny: ["tag:destructive"]
"""


def test_tokens_give_each_principal_its_view(live_db: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    env = {"MATH_TOKEN": "math-team-token"}
    with http_server(live_db, tmp_path, "--tokens", str(tokens), env=env) as (url, stderr):

        async def check() -> None:
            async with http_session(url, "math-team-token", mode=MODERN) as math:
                listed = await math.client.list_tools(cache_mode="refresh")
                assert listed.cache_scope == "private"
                names = {t.name for t in listed.tools}
                assert "convert_units" in names and "read_file" not in names
                refused = await math.call("call_tool", {"name": "read_file", "arguments": {}})
                assert error_code(refused) == "UNKNOWN_TOOL"
                found = await math.call("search_tools", {"query": "read a file"})
                assert {t["toolkit"] for t in found.structured_content["tools"]} <= {"math"}
            async with http_session(url, "files-team-token", mode=LEGACY) as files:
                names = set(await files.names())
                assert "read_file" in names and "convert_units" not in names
                denied = await files.call("delete_file", {"path": "x"})
                assert error_code(denied) == "UNKNOWN_TOOL"
                assert error_code(await files.call("convert_units", {})) == "UNKNOWN_TOOL"

        run(check)
        for header in ({}, {"Authorization": "Bearer nope-nope-nope"}):
            response = httpx2.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={**header, "Accept": "application/json, text/event-stream"},
            )
            assert response.status_code == 401
        logged = stderr.read_text()
        assert "math-team-token" not in logged and "files-team-token" not in logged


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
def test_tool_progress_is_forwarded(tmp_path: Path, mode: str) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.runtime_tools"))
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async def check() -> None:
        async with stdio_session(db, tmp_path, mode=mode) as s:
            result = await s.client.call_tool(
                "call_tool",
                {"name": "counts", "arguments": {"steps": 3}},
                progress_callback=progress,
            )
            assert text(result) == "3"
            with anyio.fail_after(5):
                while len(seen) < 3:
                    await anyio.sleep(0.02)

    run(check)
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
