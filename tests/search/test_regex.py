from __future__ import annotations

import pytest

from tests.helpers import toolkit_data
from toolcat import Catalog, InvalidQueryError, Toolkit


def test_regex_matches_name_description_and_parameters(sample_catalog: Catalog) -> None:
    hits = sample_catalog.search(r"^sqlite_", mode="regex", k=10).hits
    assert {h.tool.id for h in hits} == {
        "sqlite.sqlite_tables",
        "sqlite.sqlite_schema",
        "sqlite.sqlite_query",
        "sqlite.sqlite_execute",
    }
    assert all(h.score == 3.0 for h in hits)  # name matches
    top = sample_catalog.search(r"(?i)time zone", mode="regex", k=3).hits
    assert top and all("zone" in (h.tool.description + str(h.tool.parameters)).lower() for h in top)
    params_only = sample_catalog.search(r"max_chars", mode="regex").hits
    assert [h.tool.id for h in params_only] == ["files.read_file"]
    assert params_only[0].score == 1.0
    assert sample_catalog.search("Delete", mode="regex").hits
    assert sample_catalog.search("(?-i)DELETE a file", mode="regex").hits == []


def test_regex_respects_filters(sample_catalog: Catalog) -> None:
    hits = sample_catalog.search("file", mode="regex", tags=["destructive"], k=50).hits
    assert hits and all("destructive" in h.tool.tags for h in hits)
    assert all(
        not h.tool.defer_loading
        for h in sample_catalog.search("file", mode="regex", include_deferred=False).hits
    )


@pytest.mark.parametrize(
    ("pattern", "message"),
    [("(unclosed", "invalid regular expression"), ("a" * 501, "limited to 500")],
)
def test_bad_patterns(sample_catalog: Catalog, pattern: str, message: str) -> None:
    with pytest.raises(InvalidQueryError, match=message):
        sample_catalog.search(pattern, mode="regex")


def test_catastrophic_pattern_is_stopped(catalog: Catalog) -> None:
    tools = [
        {"name": f"t{i}", "description": "a" * 40 + "!", "implementation": "m:f"} for i in range(3)
    ]
    catalog.register(Toolkit.model_validate(toolkit_data("kit", module="m", tools=tools)))
    with pytest.raises(InvalidQueryError, match="backtracking"):
        catalog.search(r"(a|aa)+$", mode="regex")  # exponential on "aaa…a!"
    assert catalog.search("a+!", mode="regex").hits  # the catalog still answers
