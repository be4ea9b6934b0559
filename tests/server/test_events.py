"""A tool's events over MCP, through the SDK's real client in both eras: progress and status
as progress notifications, artifacts as embedded resources or links the server serves, within
the reader's scope."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest

pytest.importorskip("mcp")

from mcp import MCPError

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import (
    ERAS,
    LEGACY,
    MODERN,
    http_server,
    http_session,
    run,
    stdio_session,
    text,
)
from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import artifacts

SALES = "region,amount\nnorth,10\nsouth,5\nnorth,2.5\neast,x\nsouth,1\n"
REPORT = "region,count,sum,mean,min,max\nnorth,2,12.5,6.25,2.5,10.0\nsouth,2,6.0,3.0,1.0,5.0\n"


@pytest.fixture(scope="module")
def events_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("events") / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS, toolkit_from_module("tests.fixtures.runtime_tools"))
    return db


def recorder() -> tuple[list[tuple[float, float | None, str | None]], Any]:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    return seen, progress


@pytest.mark.parametrize("mode", ERAS)
def test_sample_report_streams_status_and_progress_and_embeds_its_csv(
    events_db: Path, tmp_path: Path, mode: str
) -> None:
    seen, progress = recorder()

    async def check() -> None:
        async with stdio_session(events_db, tmp_path, mode=mode) as s:
            arguments = {"csv_text": SALES, "group_by": "region", "value": "amount"}
            result = await s.client.call_tool(
                "call_tool",
                {"name": "group_report", "arguments": arguments},
                progress_callback=progress,
            )
            assert not result.is_error, result.content
            summary, embedded = result.content
            assert '"groups": 2' in summary.text and '"skipped": 1' in summary.text
            assert isinstance(embedded, types.EmbeddedResource)
            resource = embedded.resource
            assert isinstance(resource, types.TextResourceContents)
            assert resource.mime_type == "text/csv" and resource.text == REPORT
            assert str(resource.uri).endswith("/region-amount-report.csv")
            assert "amount per region" in (embedded.meta or {})["toolcat/description"]
            with anyio.fail_after(5):
                while not any(m and m.startswith("writing report") for *_, m in seen):
                    await anyio.sleep(0.02)
            # Without a progress token the server sends nothing, and the result is the same.
            quiet = await s.call("call_tool", {"name": "group_report", "arguments": arguments})
            assert quiet.content[1].resource.text == REPORT  # type: ignore[union-attr]

    run(check)
    messages = [m for *_, m in seen]
    assert messages[0] == "parsing: reading CSV to group by 'region'"
    assert messages[1] == "aggregating: 5 rows"
    assert "5 of 5 rows" in messages and messages[-1] == "writing report: 2 groups"
    done = [d for d, *_ in seen]
    assert done == sorted(done)  # MCP progress never goes back; a status repeats the last
    assert (5, 5, "5 of 5 rows") in seen


@pytest.mark.parametrize("mode", ERAS)
def test_large_artifacts_are_links_the_server_serves(
    events_db: Path, tmp_path: Path, mode: str
) -> None:
    size = artifacts.INLINE_BYTES + 10

    async def check() -> None:
        async with stdio_session(events_db, tmp_path, mode=mode) as s:
            result = await s.call(
                "call_tool", {"name": "reports", "arguments": {"artifacts": 2, "big": size}}
            )
            assert text(result) == "reported"
            _, csv_part, blob_part, link = result.content
            assert csv_part.resource.text == "a,b\n0,0\n"  # type: ignore[union-attr]
            blob = blob_part.resource.blob  # type: ignore[union-attr]
            assert base64.b64decode(blob) == b"\x01" * 10
            assert isinstance(link, types.ResourceLink)
            assert (link.name, link.size, link.mime_type) == (
                "big_report.txt",  # one safe segment, not the tool's "../big report.txt"
                size,
                "text/plain",
            )
            assert str(link.uri).startswith("toolcat://artifacts/")
            read = await s.client.read_resource(str(link.uri))
            assert read.contents[0].text == "x" * size  # type: ignore[union-attr]
            call_folder = str(link.uri).rsplit("/", 1)[0]
            for other in (
                str(link.uri).replace("big", "other"),
                f"{call_folder}/../../../../etc/passwd",
                f"{call_folder}/%2e%2e%2f%2e%2e%2fcatalog.db",
                "file:///etc/passwd",
            ):
                with pytest.raises(MCPError, match="no artifact"):
                    await s.client.read_resource(other)

    run(check)


TOKENS = """\
principals:
  - name: rt-team
    token: rt-team-token-1
    toolkits: [rt]
  - name: rt-others
    token: rt-others-token
    toolkits: [rt]
  - name: math-team
    token: math-team-token
    toolkits: [math]
"""


def test_reading_a_link_takes_the_principal_that_made_it(events_db: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    size = artifacts.INLINE_BYTES + 1
    env = {"TOOLCAT_ARTIFACTS": str(tmp_path / "kept")}
    with http_server(events_db, tmp_path, "--tokens", str(tokens), env=env) as (url, _):

        async def check() -> None:
            async with http_session(url, "rt-team-token-1", mode=MODERN) as s:
                result = await s.call(
                    "call_tool", {"name": "reports", "arguments": {"artifacts": 0, "big": size}}
                )
                link = str(result.content[-1].uri)  # type: ignore[union-attr]
                read = await s.client.read_resource(link)
                assert len(read.contents[0].text) == size  # type: ignore[union-attr]
            for token in ("rt-others-token", "math-team-token"):
                async with http_session(url, token, mode=LEGACY) as other:
                    with pytest.raises(MCPError, match="no artifact"):
                        await other.client.read_resource(link)
            (file,) = (tmp_path / "kept").glob("*/*")
            file.unlink()  # past its time in the folder
            async with http_session(url, "rt-team-token-1", mode=MODERN) as s:
                with pytest.raises(MCPError, match="no longer kept"):
                    await s.client.read_resource(link)

        run(check)
