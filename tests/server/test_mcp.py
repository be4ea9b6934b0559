"""``toolcat serve`` driven by the MCP SDK's real client: over stdio (a subprocess) and over
streamable HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS, table_snapshot
from tests.search.test_postings import bench_toolkits
from tests.server.clients import (
    ERAS,
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
            "module": "tests.fixtures.broken_import",
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


# -- stdio, both eras ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_list_is_list_mode_paginated_with_own_tools(
    served_db: Path, tmp_path: Path, mode: str
) -> None:
    with Catalog(served_db) as catalog:
        listed = catalog.list(limit=1000).tools

    async def check() -> None:
        async with stdio_session(served_db, tmp_path, "--page-size", "5", mode=mode) as s:
            first = await s.client.list_tools()
            assert [t.name for t in first.tools[:2]] == ["search_tools", "call_tool"]
            assert len(first.tools) == 7 and first.next_cursor
            tools = await s.all_tools()
            names = [t.name for t in tools]
            assert names == ["search_tools", "call_tool", *[t.name for t in listed]]
            by_name = {t.name: t for t in tools}
            read_file = by_name["read_file"]
            assert read_file.annotations is not None and read_file.annotations.read_only_hint
            assert "path" in read_file.input_schema["properties"]
            assert read_file.meta == {
                "toolcat/id": "files.read_file",
                "toolcat/version": "1.0.0",
                "anthropic/alwaysLoad": True,
            }
            assert "delete_file" not in names  # deferred
            again = await s.client.list_tools()  # no cursor: the first page again
            assert again.tools[0].name == "search_tools"
            if mode == MODERN:  # cache hints: the same list for everyone, for 5 s
                assert first.ttl_ms == 5000 and first.cache_scope == "public"
            assert not (tmp_path / "server-stderr.txt").read_text().strip()  # no noise

    run(check)


def test_legacy_search_reveals_deferred_tools_and_both_call_paths_work(
    served_db: Path, tmp_path: Path
) -> None:
    (tmp_path / "old.txt").write_text("bye")

    async def check() -> None:
        async with stdio_session(served_db, tmp_path, mode=LEGACY) as s:
            before = set(await s.names())
            result = await s.call("search_tools", {"query": "delete a file", "k": 3})
            assert not result.is_error
            found = result.structured_content["tools"]
            assert found[0]["name"] == "delete_file"
            assert found[0]["inputSchema"]["required"] == ["path"]
            await s.wait_for(LIST_CHANGED)
            after = set(await s.names())
            assert "delete_file" in after - before
            deleted = await s.call("delete_file", {"path": "old.txt"})
            assert not deleted.is_error, deleted.content
            assert not (tmp_path / "old.txt").exists()
            (tmp_path / "again.txt").write_text("x")
            again = await s.call(
                "call_tool", {"name": "delete_file", "arguments": {"path": "again.txt"}}
            )
            assert not again.is_error and not (tmp_path / "again.txt").exists()
            count = s.notifications.count(LIST_CHANGED)
            await s.call("search_tools", {"query": "delete a file", "k": 3})
            await s.call("search_tools", {"query": "now"})  # a listed tool: no change
            assert s.notifications.count(LIST_CHANGED) == count

    run(check)


def test_2026_list_never_varies_and_call_tool_is_the_way_in(
    served_db: Path, tmp_path: Path
) -> None:
    (tmp_path / "old.txt").write_text("bye")

    async def check() -> None:
        async with stdio_session(served_db, tmp_path, mode=MODERN) as s:
            before = await s.names()
            found = await s.call("search_tools", {"query": "delete a file", "k": 3})
            assert found.structured_content["tools"][0]["name"] == "delete_file"
            assert await s.names() == before  # the spec: tools/list does not vary
            assert LIST_CHANGED not in s.notifications
            deleted = await s.call(
                "call_tool", {"name": "delete_file", "arguments": {"path": "old.txt"}}
            )
            assert not deleted.is_error and not (tmp_path / "old.txt").exists()
        async with stdio_session(served_db, tmp_path, mode="auto") as other:
            assert other.client.protocol_version == MODERN  # auto picks 2026 via discover
            assert await other.names() == before  # same identity, same list

    run(check)


def test_structured_results_and_annotations(served_db: Path, tmp_path: Path) -> None:
    async def check() -> None:
        async with stdio_session(served_db, tmp_path, mode=MODERN) as s:
            converted = await s.call(
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
            assert not converted.is_error, converted.content
            assert converted.structured_content is not None
            assert converted.structured_content["datetime"].startswith("2026-03-29T07:30")
            plain = await s.call("call_tool", {"name": "add", "arguments": {"a": 2}})
            assert not plain.is_error and text(plain) == "4"
            assert plain.structured_content is None  # no output schema

    run(check)


@pytest.mark.parametrize("mode", ERAS)
def test_every_error_code_is_a_result_and_the_server_keeps_serving(
    served_db: Path, tmp_path: Path, mode: str
) -> None:
    before = table_snapshot(served_db)

    async def check() -> None:
        async with stdio_session(served_db, tmp_path, mode=mode) as s:
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
                ("add@9.9.9", {"a": 1}, "UNKNOWN_TOOL", "add"),
            ]
            for name, arguments, code, message in cases:
                result = await s.call(name, arguments)
                assert error_code(result) == code, (name, result.content)
                assert message in text(result), result.content
                assert result.meta is not None and result.meta["toolcat/error_code"] == code
            odd = await s.call("search_tools", {"query": '")(*&^%$ OR NOT ~~~'})
            assert not odd.is_error
            ok = await s.call("add", {"a": 1, "b": 1})
            assert text(ok) == "2"

    run(check)
    assert table_snapshot(served_db) == before


@pytest.mark.parametrize("where", ["global", "serve"])
def test_policy_denies_through_the_server(served_db: Path, tmp_path: Path, where: str) -> None:
    deny = ("--deny", "tag:math")

    async def check() -> None:
        async with stdio_session(
            served_db,
            tmp_path,
            *(deny if where == "serve" else ()),
            mode=MODERN,
            policy=deny if where == "global" else (),
        ) as s:
            for name in ("prime_factors", "fixtures.add@1.0.0"):  # hidden: as if not there
                assert error_code(await s.call(name, {"n": 12})) == "UNKNOWN_TOOL"
                refused = await s.call("call_tool", {"name": name, "arguments": {"n": 12}})
                assert error_code(refused) == "UNKNOWN_TOOL"
            assert "prime_factors" not in await s.names()
            found = await s.call("search_tools", {"query": "prime factors of a number"})
            assert "prime_factors" not in {t["name"] for t in found.structured_content["tools"]}
            allowed = await s.call("word_stats", {"text": "a b c"})
            assert not allowed.is_error

    run(check)


def test_refuse_unsearched_legacy(served_db: Path, tmp_path: Path) -> None:
    async def check() -> None:
        async with stdio_session(served_db, tmp_path, "--refuse-unsearched", mode=LEGACY) as s:
            refused = await s.call("add", {"a": 1})
            assert error_code(refused) == "TOOL_DENIED"
            assert "search_tools first" in text(refused)
            assert error_code(await s.call("fixtures.add@1.0.0", {"a": 1})) == "TOOL_DENIED"
            listed = await s.call("word_stats", {"text": "a b"})
            assert not listed.is_error  # list-mode tools need no search
            await s.call("search_tools", {"query": "add two integers"})
            allowed = await s.call("add", {"a": 1})
            assert not allowed.is_error and text(allowed) == "3"
            pinned = await s.call("fixtures.add@1.0.0", {"a": 2})
            assert text(pinned) == "4"

    run(check)


def test_refuse_unsearched_2026(served_db: Path, tmp_path: Path) -> None:
    async def check() -> None:
        async with stdio_session(served_db, tmp_path, "--refuse-unsearched", mode=MODERN) as s:
            assert error_code(await s.call("add", {"a": 1})) == "TOOL_DENIED"
            pinned = await s.call("call_tool", {"name": "fixtures.add@1.0.0", "arguments": {}})
            assert error_code(pinned) == "TOOL_DENIED"
            via = await s.call("call_tool", {"name": "add", "arguments": {"a": 1}})
            assert text(via) == "3"  # call_tool is the 2026 way after a search

    run(check)


@pytest.mark.parametrize("mode", ERAS)
def test_plain_toolkit_bounds_every_call_path(served_db: Path, tmp_path: Path, mode: str) -> None:
    with Catalog(served_db) as catalog:
        math_tools = catalog.list(toolkit="math", include_deferred=True).tools
    (tmp_path / "keep.txt").write_text("keep")

    async def check() -> None:
        async with stdio_session(
            served_db, tmp_path, "--plain", "--toolkit", "math", mode=mode
        ) as s:
            names = await s.names()
            assert names == [t.name for t in math_tools]
            assert any(t.defer_loading for t in math_tools)  # deferred ones are listed too
            assert error_code(await s.call("search_tools", {"query": "x"})) == "UNKNOWN_TOOL"
            for name in ("files.write_file", "write_file", "files.delete_file@1.0.0"):
                refused = await s.call(name, {"path": "keep.txt", "content": "gone"})
                assert error_code(refused) == "UNKNOWN_TOOL", name
                assert "Did you mean" not in text(refused) or "files." not in text(refused)
            factors = await s.call("prime_factors", {"n": 12})
            assert not factors.is_error
        assert (tmp_path / "keep.txt").read_text() == "keep"

    run(check)


def test_tag_bounds_calls(served_db: Path, tmp_path: Path) -> None:
    async def check() -> None:
        async with stdio_session(served_db, tmp_path, "--tag", "filesystem", mode=MODERN) as s:
            refused = await s.call("call_tool", {"name": "convert_units", "arguments": {}})
            assert error_code(refused) == "UNKNOWN_TOOL" and "tag" not in text(refused)
            assert error_code(await s.call("convert_units", {})) == "UNKNOWN_TOOL"

    run(check)


# -- HTTP -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_url(served_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("http")
    with http_server(served_db, tmp, env={"TOOLCAT_TOKEN": TOKEN}) as (url, _stderr):
        yield url


def test_http_legacy_session_list_search_call(http_url: str) -> None:
    async def check() -> None:
        async with http_session(http_url, TOKEN, mode=LEGACY) as s:
            assert s.client.server_capabilities.tools.list_changed  # type: ignore[union-attr]
            tools = await s.all_tools()
            assert tools[0].name == "search_tools" and "read_file" in {t.name for t in tools}
            found = await s.call("search_tools", {"query": "add two integers", "k": 2})
            assert found.structured_content["tools"][0]["name"] == "add"
            await s.wait_for(LIST_CHANGED)
            assert "add" in await s.names()
            assert text(await s.call("add", {"a": 20, "b": 22})) == "42"
            via = await s.call("call_tool", {"name": "add", "arguments": {"a": 1}})
            assert text(via) == "3"
            assert error_code(await s.call("nope", {})) == "UNKNOWN_TOOL"
        async with http_session(http_url, TOKEN, mode=LEGACY) as other:  # nothing revealed
            assert "add" not in await other.names()

    run(check)


@pytest.mark.parametrize("mode", [MODERN, "auto"])
def test_http_2026_stateless(http_url: str, mode: str) -> None:
    async def check() -> None:
        async with http_session(http_url, TOKEN, mode=mode) as s:
            assert s.client.protocol_version == MODERN
            first = await s.client.list_tools(cache_mode="refresh")
            assert first.ttl_ms == 5000 and first.cache_scope == "public"
            found = await s.call("search_tools", {"query": "add two integers", "k": 2})
            assert found.structured_content["tools"][0]["name"] == "add"
            via = await s.call("call_tool", {"name": "add", "arguments": {"a": 1}})
            assert text(via) == "3"
            again = await s.client.list_tools(cache_mode="refresh")
            assert [t.name for t in again.tools] == [t.name for t in first.tools]

    run(check)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}],
    ids=["none", "wrong", "not-bearer"],
)
def test_http_refuses_requests_without_the_token(http_url: str, headers: dict[str, str]) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx2.post(
        http_url, json=body, headers={**headers, "Accept": "application/json, text/event-stream"}
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_http_scheme_is_case_insensitive(http_url: str) -> None:
    async def check() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"bearer {TOKEN}"}) as http:
            from mcp import Client
            from mcp.client.streamable_http import streamable_http_client

            async with Client(streamable_http_client(http_url, http_client=http), mode=MODERN) as c:
                assert (await c.list_tools()).tools[0].name == "search_tools"

    run(check)


def test_http_oversized_body_is_413(http_url: str) -> None:
    body = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "'
        + (b"a" * (4 * 1024 * 1024 + 10))
        + b'"}}'
    )
    response = httpx2.post(
        http_url,
        content=body,
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": MODERN,
        },
    )
    assert response.status_code == 413


def test_http_unknown_method_is_method_not_found(http_url: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/frobnicate",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    response = httpx2.post(
        http_url,
        json=body,
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/frobnicate",
        },
    )
    assert response.json()["error"]["code"] == -32601, response.text


def test_http_client_with_wrong_token_fails_cleanly(http_url: str) -> None:
    async def check() -> None:
        async with http_session(http_url, "wrong", mode=LEGACY) as s:
            del s

    with pytest.raises(BaseException) as raised:
        run(check)
    # SDK 2.x surfaces a non-2xx answer as an MCPError (the raw 401 is tested above)
    assert "MCPError" in repr(raised.value) or "401" in repr(raised.value)


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.mark.parametrize(
    ("params", "headers", "code"),
    [
        (
            {"_meta": {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}},
            {"MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "tools/list"},
            -32022,  # unsupported protocol version, with the supported ones in data
        ),
        (
            {"_meta": {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": "nope"}},
            {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"},
            -32602,  # malformed _meta
        ),
        (
            {"_meta": MODERN_META},
            {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"},
            -32020,  # Mcp-Method disagrees with the body
        ),
    ],
    ids=["unsupported-version", "malformed-meta", "header-mismatch"],
)
def test_http_bad_2026_envelopes_are_clear_errors(
    http_url: str, params: dict[str, Any], headers: dict[str, str], code: int
) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}
    response = httpx2.post(
        http_url,
        json=body,
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    ok = httpx2.post(
        http_url,
        json={**body, "params": {"_meta": MODERN_META}},
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/list",
        },
    )
    assert ok.status_code == 200  # still serving


def test_http_mcp_param_header_must_match_call_tool_name(http_url: str) -> None:
    arguments = {"name": "add", "arguments": {"a": 1}}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "call_tool", "arguments": arguments, "_meta": MODERN_META},
    }
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "call_tool",
    }
    lying = httpx2.post(http_url, json=body, headers={**headers, "Mcp-Param-Tool": "delete_file"})
    assert lying.status_code == 400 and lying.json()["error"]["code"] == -32020
    honest = httpx2.post(http_url, json=body, headers={**headers, "Mcp-Param-Tool": "add"})
    assert honest.status_code == 200 and '"3"' in honest.text


def test_a_scope_of_allow_rules_finds_what_its_toolkit_finds(tmp_path: Path) -> None:
    """A server that denies everything but one toolkit (``--deny '*' --allow 'text.*'``)
    finds that toolkit's matching tools, as ``--toolkit text`` does."""
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS, *bench_toolkits(300)[0])
    query = {"query": "find the distance between two cities", "k": 5}

    async def names(*serve_args: str) -> list[str]:
        async with stdio_session(db, tmp_path, *serve_args, "--mode", "bm25") as s:
            found = await s.call("search_tools", query)
            return [t["name"] for t in found.structured_content["tools"]]

    async def check() -> None:
        by_toolkit = await names("--toolkit", "text")
        assert by_toolkit  # the toolkit has tools for this query
        assert await names("--deny", "*", "--allow", "text.*") == by_toolkit

    run(check)


def test_readers_open_the_catalog_as_the_server_did(tmp_path: Path) -> None:
    """Searches run on reader catalogs: they must search with the server catalog's model
    and trust what it trusts."""
    from toolcat import Policy
    from toolcat.server.mcp import Readers

    settings = {
        "embedding_model": "paraphrase-MiniLM-L3-v2",
        "trust_any_module": True,
        "policy": Policy.of(deny=["tag:destructive"]),
        "default_timeout": 3.5,
    }
    with Catalog(tmp_path / "catalog.db", **settings) as catalog:  # type: ignore[arg-type]
        readers = Readers(catalog, 2)
        try:
            with readers.borrowed() as opened:
                assert {name: getattr(opened, name) for name in settings} == settings
        finally:
            readers.close()


def test_readers_hold_one_bm25_index_and_one_vector_matrix(tmp_path: Path) -> None:
    """A server's pooled readers search with one in-memory BM25 index and one vector matrix,
    built once per revision (at 1M tools ~700 MB and 1.5 GB apiece), and never one of another
    revision."""
    from toolcat.server.mcp import Readers

    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.reindex()
        readers = Readers(catalog, 2)
        try:
            first, second = readers._take(), readers._take()
            assert first is not second
            for reader in (first, second, first, second):
                reader.search("remove an old file", k=3, mode="bm25")
                reader.search("erase an old document", k=3, mode="hybrid")
            index = first._search.postings.index
            assert index is not None and second._search.postings.index is index
            matrix = first._search.vectors.matrix
            assert matrix is not None and second._search.vectors.matrix is matrix
            catalog.remove("time")  # a new revision
            for reader in (first, second, first):
                after = reader.search("remove an old file", mode="bm25")
                hybrid = reader.search("erase an old document", mode="hybrid")
            assert first._search.postings.index is not index  # rebuilt at the new revision
            assert first._search.vectors.matrix is not matrix
            with Catalog(tmp_path / "catalog.db") as fresh:
                expected = fresh.search("remove an old file", mode="bm25")
                expected_hybrid = fresh.search("erase an old document", mode="hybrid")
            for got, want in ((after, expected), (hybrid, expected_hybrid)):
                assert [(h.tool.name, h.score) for h in got.hits] == [
                    (h.tool.name, h.score) for h in want.hits
                ]
        finally:
            readers.close()


@pytest.mark.parametrize("mode", ERAS)
def test_search_tools_carries_match_and_no_match(
    served_db: Path, tmp_path: Path, mode: str
) -> None:
    """The signal the CLI and the API show (per-hit ``match``, ``no_match``) reaches an agent
    over MCP: the same values ``Catalog.search`` gives, for a fitting and a hopeless query."""
    queries = ["add two integers", "qwxz vbnm plkj frobnicate the zorblax"]
    with Catalog(served_db) as catalog:
        expected = {}
        for query in queries:
            result = catalog.search(query, k=5)
            expected[query] = (result.no_match, [(h.tool.name, h.match) for h in result.hits])
    assert expected[queries[0]][0] is False and expected[queries[1]][0] is True

    async def check() -> None:
        async with stdio_session(served_db, tmp_path, mode=mode) as s:
            for query in queries:
                found = (await s.call("search_tools", {"query": query})).structured_content
                got = [(t["name"], t["match"]) for t in found["tools"]]
                assert (found["no_match"], got) == expected[query], query

    run(check)
