"""Tag filters (all / any / none) over MCP: ``serve``'s tag options, ``search_tools``'
arguments and a tokens file's principals, through the SDK's real client in both eras."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import (
    ERAS,
    LEGACY,
    MODERN,
    error_code,
    http_server,
    http_session,
    run,
    stdio_session,
)
from toolcat import Catalog, TagFilter


@pytest.fixture(scope="module")
def tagged_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("tags") / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return db


def tags_of(db: Path) -> dict[str, list[str]]:
    with Catalog(db) as catalog:
        return {t.name: t.tags for t in catalog.iter_tools()}


@pytest.mark.parametrize("mode", ERAS)
def test_serve_tag_options_bound_list_search_and_calls(
    tagged_db: Path, tmp_path: Path, mode: str
) -> None:
    tags = tags_of(tagged_db)
    served = TagFilter.of(any_tags=["filesystem", "time"], exclude_tags=["destructive"])
    args = ("--any-tag", "filesystem", "--any-tag", "time", "--exclude-tag", "destructive")

    async def check() -> None:
        async with stdio_session(tagged_db, tmp_path, *args, mode=mode) as s:
            listed = set(await s.names()) - {"search_tools", "call_tool"}
            assert listed and all(served.matches(tags[name]) for name in listed)
            found = await s.call("search_tools", {"query": "file or time", "k": 20})
            names = {t["name"] for t in found.structured_content["tools"]}
            assert names == {n for n, t in tags.items() if served.matches(t)}
            # The caller narrows further; it cannot widen the server's rule.
            asked = {"query": "file", "k": 20, "exclude_tags": ["read-only"]}
            narrowed = await s.call("search_tools", asked)
            names = {t["name"] for t in narrowed.structured_content["tools"]}
            assert names and all("read-only" not in tags[n] for n in names)
            assert all(served.matches(tags[n]) for n in names)
            wider = await s.call("search_tools", {"query": "sql", "any_tags": ["sql"]})
            assert wider.structured_content["tools"] == []
            # Outside the scope a tool does not exist for the caller (nothing about its tags).
            refused = await s.call("call_tool", {"name": "delete_file", "arguments": {}})
            assert error_code(refused) == "UNKNOWN_TOOL"
            assert "destructive" not in refused.content[0].text
            bad = await s.call("search_tools", {"query": "x", "any_tags": "sql"})
            assert error_code(bad) == "INVALID_ARGUMENTS" and "any_tags" in bad.content[0].text

    run(check)


TOKENS = """\
principals:
  - name: readers
    token: readers-token-1
    any_tags: [math, text]
    exclude_tags: [data]
  - name: writers
    token: writers-token-1
    tags: [filesystem]
    exclude_tags: [read-only]
"""


def test_tokens_file_tag_rules_per_principal(tagged_db: Path, tmp_path: Path) -> None:
    tags = tags_of(tagged_db)
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    readers = TagFilter.of(any_tags=["math", "text"], exclude_tags=["data"])
    writers = TagFilter.of(["filesystem"], exclude_tags=["read-only"])
    with Catalog(tagged_db) as catalog:
        listed_everything = {t.name for t in catalog.list(limit=1000).tools}
    with http_server(tagged_db, tmp_path, "--tokens", str(tokens)) as (url, _stderr):

        async def check() -> None:
            async with http_session(url, "readers-token-1", mode=MODERN) as s:
                listed = set(await s.names()) - {"search_tools", "call_tool"}
                assert listed == {n for n in listed_everything if readers.matches(tags[n])}
                found = await s.call("search_tools", {"query": "count words in text", "k": 50})
                names = {t["name"] for t in found.structured_content["tools"]}
                assert names and all(readers.matches(tags[n]) for n in names)
                refused = await s.call("call_tool", {"name": "read_file", "arguments": {}})
                assert error_code(refused) == "UNKNOWN_TOOL"
            async with http_session(url, "writers-token-1", mode=LEGACY) as s:
                found = await s.call("search_tools", {"query": "file", "k": 50})
                names = {t["name"] for t in found.structured_content["tools"]}
                assert names == {n for n, t in tags.items() if writers.matches(t)}
                assert names  # every file tool's description says "file"

        run(check)
