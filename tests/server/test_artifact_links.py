"""Artifacts a server hands out, read back with ``resources/read``: links kept per
principal (one caller's calls never push out another's), embedded artifacts readable under
the URI they carry, and names and media types a tool chose made safe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import mcp.types as types
from mcp import MCPError

from tests.server.clients import ERAS, MODERN, http_server, http_session, run, stdio_session
from toolcat import Catalog, ToolEvent
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import artifacts
from toolcat.server import events
from toolcat.server.scope import Scope


@pytest.fixture(scope="module")
def art_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("links") / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.artifact_tools"))
    return db


def test_one_principal_cannot_push_out_anothers_links(
    art_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "MAX_LINKS", 5)
    with Catalog(art_db) as catalog:
        tool = catalog.get("emit")
    kept = tmp_path / "a.txt"
    kept.write_text("theirs")
    event = ToolEvent(kind="artifact", name="a.txt", mime_type="text/plain", uri=kept.as_uri())
    links = events.ArtifactLinks()
    (theirs,) = links.content([event], tool, "victim")
    for n in range(50):  # another caller's many calls, each with its own file
        mine = tmp_path / f"call-{n:032x}" / "a.txt"
        mine.parent.mkdir()
        mine.write_text("mine")
        flood = event.model_copy(update={"uri": mine.as_uri()})
        links.content([flood], tool, "flooder")
    read = links.read(str(theirs.uri), Scope(), "victim")
    assert read.contents[0].text == "theirs"  # type: ignore[union-attr]
    with pytest.raises(MCPError, match="no artifact"):  # not the flooder's to read
        links.read(str(theirs.uri), Scope(), "flooder")


def test_embedded_content_held_per_principal_is_bounded(
    art_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "MAX_INLINE_HELD", 1000)
    with Catalog(art_db) as catalog:
        tool = catalog.get("emit")
    links = events.ArtifactLinks()
    small = [ToolEvent(kind="artifact", name=f"{i}.txt", text="x" * 300) for i in range(10)]
    uris = [str(block.resource.uri) for block in links.content(small, tool, "p")]  # type: ignore[union-attr]
    readable = []
    for uri in uris:
        try:
            links.read(uri, Scope(), "p")
            readable.append(uri)
        except MCPError:
            pass
    assert readable == uris[-3:]  # the latest that fit in 1000 characters


@pytest.mark.parametrize("mode", ERAS)
def test_an_embedded_artifact_reads_back_and_names_are_safe(
    art_db: Path, tmp_path: Path, mode: str
) -> None:
    async def check() -> None:
        async with stdio_session(art_db, tmp_path, mode=mode) as s:
            small = {"name": "../../x", "size": 5, "mime_type": "text/html\x1b]0;owned\x07"}
            result = await s.call("call_tool", {"name": "emit", "arguments": small})
            assert not result.is_error, result.content
            embedded = result.content[-1]
            assert isinstance(embedded, types.EmbeddedResource)
            uri = str(embedded.resource.uri)
            assert uri.startswith("toolcat://artifacts/inline/") and uri.endswith("/x")
            assert embedded.resource.mime_type == "application/octet-stream"
            read = await s.client.read_resource(uri)
            assert read.contents[0].text == "xxxxx"  # type: ignore[union-attr]
            big = {"name": "../../etc/pass wd", "size": artifacts.INLINE_BYTES + 1}
            result = await s.call("call_tool", {"name": "emit", "arguments": big})
            link = result.content[-1]
            assert isinstance(link, types.ResourceLink)
            assert link.name == "pass_wd" and "/" not in link.name
            second = await s.call("call_tool", {"name": "emit", "arguments": small})
            other = str(second.content[-1].resource.uri)  # type: ignore[union-attr]
            assert other != uri  # each embedded artifact has its own URI

    run(check)


TOKENS = """\
principals:
  - name: one
    token: one-token-0001
    toolkits: [art]
  - name: two
    token: two-token-0002
    toolkits: [art]
"""


def test_an_embedded_artifact_is_read_by_its_principal_only(art_db: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    with http_server(art_db, tmp_path, "--tokens", str(tokens)) as (url, _):

        async def check() -> None:
            async with http_session(url, "one-token-0001", mode=MODERN) as s:
                arguments = {"name": "r.json", "size": 3, "mime_type": "application/json"}
                result = await s.call("call_tool", {"name": "emit", "arguments": arguments})
                uri = str(result.content[-1].resource.uri)  # type: ignore[union-attr]
                read = await s.client.read_resource(uri)
                assert json.dumps(read.contents[0].text) == '"xxx"'  # type: ignore[union-attr]
            async with http_session(url, "two-token-0002", mode=MODERN) as other:
                with pytest.raises(MCPError, match="no artifact"):
                    await other.client.read_resource(uri)

        run(check)
