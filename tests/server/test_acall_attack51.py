"""Hostile (attack51), through the SDK's real client: a tool whose result raises, as it is
converted to JSON (its own ``model_dump``), what a tool may never raise into its caller
(``KeyboardInterrupt``, ``CancelledError``) answers an error result, first call (imported on
a thread running ``call``) and later ones (``acall``'s direct path) alike, and the server
answers the next call."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from tests.server.clients import error_code, run, stdio_session, text
from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module


def test_a_result_that_raises_as_it_is_converted_never_reaches_the_server(
    tmp_path: Path,
) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.attack51_tools"))

    async def main() -> None:
        async with stdio_session(db, tmp_path, "--plain") as s:
            with anyio.fail_after(20):
                for kind in ["keyboard", "cancelled", "keyboard", "cancelled"]:
                    result = await s.call("bad_result", {"kind": kind})
                    assert error_code(result) == "TOOL_ERROR", text(result)
                assert text(await s.call("naps", {"seconds": 0})) == "awake"

    run(main)
