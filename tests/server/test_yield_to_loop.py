"""``toolcat serve`` (its own process) runs calls on threads that yield to its event loop
(``SCHED_BATCH``); a ``CatalogServer`` a library builds leaves its threads alone."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from tests.server.clients import run, stdio_session, text
from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module
from toolcat.server.mcp import CatalogServer

pytestmark = pytest.mark.skipif(
    not hasattr(os, "SCHED_BATCH"), reason="scheduling policies are Linux's"
)


def test_serve_runs_calls_on_threads_that_yield_to_its_loop(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.direct_tools"))

    async def main() -> None:
        async with stdio_session(db, tmp_path, "--plain") as s:
            with anyio.fail_after(20):
                for _ in range(2):  # imported on the first call, the direct path after
                    assert int(text(await s.call("scheduling"))) == os.SCHED_BATCH

    run(main)


def test_a_library_server_leaves_its_threads_alone(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.direct_tools"))
        server = CatalogServer(catalog)
        assert not server.readers.yields_to_loop
        assert not catalog.runtime.executor.threads.yields_to_loop
        result = anyio.run(lambda: catalog.acall("direct.scheduling"))
        assert result.data == os.SCHED_OTHER
