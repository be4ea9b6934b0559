"""attack59: ``search_tools`` after the kept-entry text, the empty-tags fast path and the
per-principal memory of recent searches (server/mcp.py, policy/tags.py, server/usage.py).

A client's arguments and clientInfo are input; the server's tag options are the admin's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS, stable_id
from tests.server.clients import MODERN, error_code, run, stdio_session
from toolcat import Catalog, TagFilter
from toolcat.errors import InvalidQueryError
from toolcat.server.usage import RecentSearches


@pytest.fixture(scope="module")
def tagged_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("tags59") / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return db


ODD = [
    ("tags", "filesystem"),
    ("tags", {"filesystem": 1}),
    ("tags", [["filesystem"]]),
    ("tags", [1]),
    ("tags", [None]),
    ("any_tags", "sql"),
    ("any_tags", {"sql": True}),
    ("any_tags", [["sql"]]),
    ("exclude_tags", "destructive"),
    ("exclude_tags", [{"a": 1}]),
    ("exclude_tags", True),
    ("tags", 7),
    ("tags", {}),  # falsy, but not a list: refused, not read as "no tags"
    ("any_tags", ""),
    ("exclude_tags", 0),
    ("tags", False),
]


def test_held_odd_tag_arguments_are_refused_and_never_widen_the_scope(
    tagged_db: Path, tmp_path: Path
) -> None:
    with Catalog(tagged_db) as catalog:
        tags = {t.name: t.tags for t in catalog.iter_tools()}
    served = TagFilter.of(any_tags=["filesystem", "time"], exclude_tags=["destructive"])
    args = ("--any-tag", "filesystem", "--any-tag", "time", "--exclude-tag", "destructive")

    async def check() -> None:
        async with stdio_session(tagged_db, tmp_path, *args, mode=MODERN) as s:
            for key, value in ODD:
                got = await s.call("search_tools", {"query": "file sql delete", key: value})
                assert error_code(got) == "INVALID_ARGUMENTS", (key, value, got.content)
                assert key in got.content[0].text
            # Empty lists, null and blank tags ask nothing: the scope alone bounds.
            for extra in ({"tags": []}, {"tags": [" "]}, {"any_tags": []}, {"tags": None}, {}):
                got = await s.call("search_tools", {"query": "delete file sql", "k": 50, **extra})
                names = {t["name"] for t in got.structured_content["tools"]}
                assert names and all(served.matches(tags[n]) for n in names), extra
                # The text block is json.dumps of the structured answer, byte for byte.
                assert got.content[0].text == json.dumps(got.structured_content)

    run(check)


@pytest.mark.parametrize(
    "value",
    ["", "   ", {}, {"a": 1}, iter(()), iter(["x"]), [["x"]], [1], frozenset()],
    ids=stable_id,
)
def test_held_tag_filter_of_odd_types(value: Any) -> None:
    """``TagFilter.of``'s fast path: only empty containers skip the walk; anything else is
    cleaned (a lone string one tag) or refused; never a filter wider than asked."""
    scope = TagFilter.of(["a"], exclude_tags=["b"])
    try:
        asked = TagFilter.of(value, value if not isinstance(value, type(iter(()))) else ())
    except InvalidQueryError:
        return
    both = scope & asked
    assert set(scope.all) <= set(both.all) and set(scope.none) <= set(both.none)


def test_held_a_principals_client_names_never_reach_anothers_memory() -> None:
    memory = RecentSearches(per_caller=10, max_callers=5, max_clients=3)
    memory.searched(("victim", "app"), None, "convert km", ["math.convert_units"])
    for i in range(500):  # the attacker: client names, and its own principal key shapes
        memory.searched(("attacker", f"c{i}"), None, "x", ["math.convert_units"])
        memory.searched(("attacker", ("victim", "app")), None, "x", ["math.convert_units"])
    assert memory.called(("attacker", "app"), None, "math.convert_units") is None
    assert memory.called(("victim", "c1"), None, "math.convert_units") is None
    assert memory.called(("victim", "app"), None, "math.convert_units") == "convert km"
    assert memory.called(("victim", "app"), None, "math.convert_units") is None  # once


def test_held_payload_text_is_json_dumps_and_kept_entries_are_per_name(
    tagged_db: Path,
) -> None:
    from toolcat.server.mcp import FoundTools, payload_text

    found = FoundTools(size=2)
    with Catalog(tagged_db) as catalog:
        tools = list(catalog.iter_tools())[:3]
    first = found.entry(tools[0], "short")
    other = found.entry(tools[0], f"{tools[0].toolkit}.{tools[0].name}")
    assert first[0]["name"] == "short" and other[0]["name"] != "short"
    shown = [
        {**found.entry(t, 'n\u2028"\\\x00')[0], "score": s, "match": m}
        for t, s, m in zip(
            tools, [1e-9, -0.0, 123456.789], ["semantic", "\ud800?", None], strict=True
        )
    ]
    heads = [found.entry(t, 'n\u2028"\\\x00')[1] for t in tools]
    payload = {"query": "\x1b]0;x\x07", "mode": "hybrid", "no_match": False, "tools": shown}
    payload["warnings"] = ["w\u00e9"]
    assert payload_text(payload, heads) == json.dumps(payload)
