"""Tag filters (all / any / none): one rule in Python and in SQL, through list and every
search mode, with the search caches keyed by the whole rule."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog, TagFilter
from toolcat.cli import cli
from toolcat.errors import InvalidQueryError
from toolcat.store.reader import Filters

RULES = [
    {"tags": ["read-only"]},
    {"any_tags": ["math", "filesystem"]},
    {"exclude_tags": ["read-only"]},
    {"any_tags": ["filesystem", "text"], "exclude_tags": ["read-only"]},
    {"tags": ["read-only"], "any_tags": ["sql", "time"], "exclude_tags": ["database"]},
    {"any_tags": ["nosuchtag"]},
    {"exclude_tags": ["nosuchtag"]},
    {"tags": ["filesystem"], "exclude_tags": ["filesystem"]},
]
IDS = ["all", "any", "not", "any-not", "all-any-not", "any-unknown", "not-unknown", "contradiction"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalog]:
    with Catalog(tmp_path_factory.mktemp("tags") / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.reindex(batch_size=64)
        yield catalog


def expected(catalog: Catalog, rule: dict[str, Any], *, deferred: bool = True) -> set[str]:
    tag_filter = TagFilter.of(**rule)
    everything = catalog.iter_tools(include_deferred=deferred)
    return {t.id for t in everything if tag_filter.matches(t.tags)}


@pytest.mark.parametrize("rule", RULES, ids=IDS)
def test_list_applies_the_rule_in_sql_as_python_does(
    indexed: Catalog, rule: dict[str, Any]
) -> None:
    listed = {t.id for t in indexed.list(limit=1000, **rule).tools}
    assert listed == expected(indexed, rule, deferred=False)
    with_deferred = {t.id for t in indexed.iter_tools(**rule)}
    assert with_deferred == expected(indexed, rule)
    summaries = indexed.list_summaries(limit=1000, **rule)["tools"]
    assert {t["id"] for t in summaries} == listed


@pytest.mark.parametrize("mode", ["bm25", "embedding", "hybrid", "regex"])
@pytest.mark.parametrize("rule", RULES, ids=IDS)
def test_search_filters_before_ranking(indexed: Catalog, rule: dict[str, Any], mode: str) -> None:
    pytest.importorskip("onnxruntime")
    query = "file|text|time|number" if mode == "regex" else "read a file or count words"
    allowed = expected(indexed, rule)
    everything = {h.tool.id for h in indexed.search(query, mode=mode, k=1000).hits}
    hits = [h.tool.id for h in indexed.search(query, mode=mode, k=1000, **rule).hits]
    assert set(hits) <= allowed
    if mode != "hybrid":  # one engine: filtering before ranking loses no matching tool
        assert set(hits) == everything & allowed
    if mode == "embedding":  # every tool has a score
        assert set(hits) == allowed
    top = [h.tool.id for h in indexed.search(query, mode=mode, k=3, **rule).hits]
    assert top == hits[:3]  # ranked within the filter, not picked from the first hits
    plain = indexed.search_summaries(query, mode=mode, k=1000, **rule)
    assert [h["tool"]["id"] for h in plain["hits"]] == hits


def test_rules_alternate_on_one_catalog_without_stale_answers(indexed: Catalog) -> None:
    """The engine keeps allowed ids and answers per Filters.key: each rule gets its own."""
    answers: dict[str, list[str]] = {}
    for _ in range(2):
        for rule, name in zip(RULES, IDS, strict=True):
            got = [h.tool.id for h in indexed.search("file", mode="bm25", k=50, **rule).hits]
            assert answers.setdefault(name, got) == got
    assert len({tuple(v) for v in answers.values()}) > 4


def test_equal_rules_share_a_key_and_different_rules_do_not() -> None:
    a = Filters(tags=TagFilter.of(["b", "a", " a "]))
    b = Filters(tags=TagFilter.of(["a", "b"]))
    assert a.key == b.key
    keys = {Filters(tags=TagFilter.of(**rule)).key for rule in RULES}
    assert len(keys) == len(RULES)
    as_all = Filters(tags=TagFilter.of(["x", "y"])).key
    as_any = Filters(tags=TagFilter.of(any_tags=["x", "y"])).key
    as_not = Filters(tags=TagFilter.of(exclude_tags=["x", "y"])).key
    assert len({as_all, as_any, as_not}) == 3
    assert Filters(tags=TagFilter.of(["  ", ""])).key is None  # blank tags filter nothing


def test_filters_meet_with_and() -> None:
    scope = TagFilter.of(any_tags=["math", "time"], exclude_tags=["destructive"])
    asked = TagFilter.of(["read-only"], any_tags=["time", "text"])
    both = scope & asked
    assert both.matches(["read-only", "time"])
    assert not both.matches(["read-only", "math"])  # in the scope's group, not the request's
    assert not both.matches(["read-only", "time", "destructive"])
    assert not both.matches(["time"])
    assert "one of math, time" in both.describe()
    assert TagFilter.of(both, exclude_tags=["x"]).none == ("destructive", "x")


@pytest.mark.parametrize(
    "bad",
    [
        {"tags": [3]},
        {"any_tags": ["x" * 201]},
        {"exclude_tags": ["a\x00b"]},
        {"tags": [f"t{i}" for i in range(65)]},
        {"any_tags": ["\udcff"]},
    ],
    ids=["not-a-string", "too-long", "nul", "too-many", "surrogate"],
)
def test_bad_tags_are_refused_with_the_field(catalog: Catalog, bad: dict[str, Any]) -> None:
    field = next(iter(bad))
    with pytest.raises(InvalidQueryError, match=field):
        catalog.list(**bad)
    with pytest.raises(InvalidQueryError, match=field):
        catalog.search("x", **bad)


def test_a_lone_string_is_one_tag(indexed: Catalog) -> None:
    one = {t.id for t in indexed.iter_tools(exclude_tags="read-only")}
    assert one == expected(indexed, {"exclude_tags": ["read-only"]})


# -- the CLI ------------------------------------------------------------------------------------


def cli_json(db: Path, *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == code, result.output
    return json.loads(result.output) if code == 0 else result.output


def test_cli_list_search_and_export_take_the_same_rule(indexed: Catalog) -> None:
    db = indexed.path
    flags = ["--any-tag", "filesystem", "--any-tag", "sql", "--exclude-tag", "read-only"]
    rule = {"any_tags": ["filesystem", "sql"], "exclude_tags": ["read-only"]}
    want = expected(indexed, rule)
    assert want and len(want) < 10
    listed = cli_json(db, "list", "--include-deferred", "--json", *flags)
    assert {t["id"] for t in listed["tools"]} == want
    found = cli_json(db, "search", "change a file or a table", "-k", "50", "--json", *flags)
    assert {h["tool"]["id"] for h in found["hits"]} <= want and found["hits"]
    exported = cli_json(db, "export", "--format", "openai-chat", "--all", *flags)
    addresses = {a.split("@")[0] for a in exported["names"].values()}  # toolkit.name@version
    assert addresses == want
    by_query = cli_json(db, "export", "--format", "mcp", "--query", "file", "-k", "50", *flags)
    assert {a.split("@")[0] for a in by_query["names"].values()} <= want and by_query["names"]


def test_cli_bad_tag_is_one_line_with_the_usage_exit_code(indexed: Catalog) -> None:
    output = cli_json(
        indexed.path, "list", "--any-tag", "x" * 300, code=InvalidQueryError.exit_code
    )
    assert output.count("\n") == 1 and "any_tags" in output and "Traceback" not in output


def test_no_lists_is_the_one_empty_filter() -> None:
    """Every unfiltered search asks for it: nothing is cleaned, sorted or merged."""
    assert TagFilter.of() is TagFilter.of()
    assert TagFilter.of() == TagFilter() == TagFilter.of([], [], [])
    assert not TagFilter.of()
