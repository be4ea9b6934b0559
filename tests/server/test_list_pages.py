"""tools/list is built page by page as clients ask (server/mcp.py ``ListPages``): the first
page of a big catalog reads what a page needs, paging through returns every listed tool
once in list order, and a scope's list holds only what the scope allows."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp import Client

from tests.server.clients import MODERN, run
from toolcat import Catalog, Tool, Toolkit
from toolcat.policy.rules import Policy
from toolcat.server import mcp as server_mcp
from toolcat.server.mcp import CatalogServer, ServeOptions

LISTED = 1_200  # six catalog reads of LIST_READ


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("pages") / "c.db"
    toolkits = [
        Toolkit(
            name=f"kit{k:02d}",
            version="1.0.0",
            tools=[
                Tool(name=f"measure_{k}_{i}", description=f"Measure quantity {i} of kind {k}")
                for i in range(LISTED // 12)
            ],
        )
        for k in range(12)
    ]
    with Catalog(db) as catalog, catalog.bulk(save_index=False):
        catalog.register(toolkits)
    return db


async def all_pages(client: Client) -> list[str]:
    page = await client.list_tools()
    names = [t.name for t in page.tools]
    while page.next_cursor:
        page = await client.list_tools(cursor=page.next_cursor)
        names += [t.name for t in page.tools]
    return names


def test_the_first_page_reads_what_a_page_needs_and_paging_lists_every_tool_once(
    big: Path,
) -> None:
    with Catalog(big) as catalog:
        expected = [t.name for t in catalog.iter_tools(include_deferred=False)]
    assert len(expected) == LISTED
    server = CatalogServer(Catalog(big), ServeOptions(page_size=10, watch_interval=3600))

    async def check() -> None:
        async with Client(server.server, mode=MODERN) as client:
            first = await client.list_tools()
            assert first.next_cursor and len(first.tools) == 12  # + search_tools, call_tool
            (pages,) = server._lists.values()
            assert len(pages.built) <= server_mcp.LIST_READ and not pages.complete
            names = await all_pages(client)
            assert names[:2] == ["search_tools", "call_tool"]
            assert names[2:] == expected  # in list order, each once
            assert pages.complete and len(pages.built) == LISTED

    run(check)


def test_a_scope_pages_through_only_what_it_allows(big: Path) -> None:
    options = ServeOptions(
        page_size=7, watch_interval=3600, policy=Policy.of(deny=["*"], allow=["kit03.*", "kit07.*"])
    )
    server = CatalogServer(Catalog(big), options)
    with Catalog(big) as catalog:
        expected = [
            t.name
            for t in catalog.iter_tools(include_deferred=False)
            if t.toolkit in ("kit03", "kit07")
        ]

    async def check() -> None:
        async with Client(server.server, mode=MODERN) as client:
            names = await all_pages(client)
            assert names[2:] == expected and len(expected) == 2 * LISTED // 12

    run(check)


@pytest.mark.parametrize("cursor", ["o\u00b2", "o\u2460", "o\u0661\u0662", "o\U0001d7d7", "o-1"])
def test_a_cursor_of_other_digits_is_invalid_params(big: Path, cursor: str) -> None:
    """str.isdigit() holds for "²" and "①", which int() refuses: the cursor raised a
    ValueError out of the handler instead of INVALID_PARAMS."""
    from mcp import MCPError

    server = CatalogServer(Catalog(big), ServeOptions(page_size=10, watch_interval=3600))

    async def check() -> None:
        async with Client(server.server, mode=MODERN) as client:
            with pytest.raises(MCPError, match="invalid cursor") as caught:
                await client.list_tools(cursor=cursor)
            assert caught.value.error.code == -32602  # INVALID_PARAMS
            assert len((await client.list_tools()).tools) == 12  # still serving

    run(check)
