"""attack52: ``toolcat serve``'s threads yield to its loop (``SCHED_BATCH``), and nothing
else does: not anyio's worker threads once a search ran on them (they run the watcher's
Litestream, the SDK's stdio and the metrics page next), not an ``mcp+stdio`` tool's server
(a process toolcat starts, not the tool)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

pytest.importorskip("mcp")

from tests.helpers import ROOT
from tests.server.clients import run, stdio_session, text
from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module
from toolcat.remote.mcp import close_all
from toolcat.server.mcp import CatalogServer, ServeOptions

pytestmark = pytest.mark.skipif(
    not hasattr(os, "SCHED_BATCH"), reason="scheduling policies are Linux's"
)

POLICY_SERVER = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'mcp_policy_server.py'}"


def policy() -> int:
    return os.sched_getscheduler(0)


def child_policy() -> int:
    """The policy a process started on the calling thread runs under (as Litestream is)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_anyio_threads_a_search_ran_on_go_back_to_the_ordinary_policy(tmp_path: Path) -> None:
    """A reader's search runs on anyio's worker thread, which the same loop hands the
    watcher's tick (a replica's Litestream restore), the SDK's stdio reads and the metrics
    page next: it yields only while the search runs."""
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.direct_tools"))
        server = CatalogServer(catalog, ServeOptions(yield_to_loop=True))

        async def main() -> tuple[int, int, int]:
            during = await server.readers.run(lambda reader: policy())
            # one idle worker thread: the next work of this loop runs on it
            after = await anyio.to_thread.run_sync(policy)
            started = await anyio.to_thread.run_sync(child_policy)
            return during, after, started

        during, after, started = anyio.run(main)
    assert during == os.SCHED_BATCH
    assert (after, started) == (os.SCHED_OTHER, os.SCHED_OTHER)


def test_an_mcp_stdio_tools_server_runs_under_the_ordinary_policy(tmp_path: Path) -> None:
    """The server of an ``mcp+stdio`` tool is started by toolcat's connection loop, which a
    call's yielding thread made: it must not run (with its own children) under SCHED_BATCH."""
    db = tmp_path / "catalog.db"
    try:
        with Catalog(db) as catalog:
            catalog.register_mcp(POLICY_SERVER, toolkit="policy")
    finally:
        close_all()

    async def main() -> None:
        async with stdio_session(db, tmp_path, "--plain") as s:
            with anyio.fail_after(60):
                result = await s.call("policy")
                assert not result.is_error, result.content
                assert json.loads(text(result)) == {"result": os.SCHED_OTHER}

    run(main)
