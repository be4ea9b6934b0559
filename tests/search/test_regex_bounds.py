"""Hostile queries: regex bombs in the regex mode are refused before compiling or stopped by
the time budget; the same strings in BM25 mode are plain text. CPU time is measured (what the
regex engine's budget counts), so the bounds hold on a loaded machine."""

from __future__ import annotations

import time

import pytest

from toolcat import Catalog, InvalidQueryError

BOMBS = [
    ("(?:(?:a{1000}){1000}){1000}", "repeats too much"),
    ("(?:a{4294967294})", "repeats too much"),
    ("(?:a{100}){101}", "repeats too much"),
    ("a{1000000}", "repeats too much"),
    ("(?x)(?:a # (\n{100}){200}", "repeats too much"),  # a comment cannot hide a repeat
    ("(" * 240 + ")" * 240, "nested too deeply"),
    ("(a|aa)+$", None),  # no sample tool text is "aaa…!", so it finishes: the budget is unused
]


@pytest.mark.parametrize(("pattern", "message"), BOMBS)
def test_regex_bombs_are_refused_fast(
    sample_catalog: Catalog, pattern: str, message: str | None
) -> None:
    started = time.process_time()
    if message is None:
        sample_catalog.search(pattern, mode="regex")
    else:
        with pytest.raises(InvalidQueryError, match=message):
            sample_catalog.search(pattern, mode="regex")
    assert time.process_time() - started < 2.0
    assert sample_catalog.search("^sqlite_", mode="regex").hits  # still answers


def test_backtracking_over_the_catalog_stops_at_the_budget(catalog: Catalog) -> None:
    from tests.helpers import toolkit_data
    from toolcat import Toolkit

    tools = [
        {"name": f"t{i}", "description": "a" * 60 + "!", "implementation": "m:f"} for i in range(5)
    ]
    catalog.register(Toolkit.model_validate(toolkit_data("kit", module=None, tools=tools)))
    started = time.process_time()
    with pytest.raises(InvalidQueryError, match="ran longer than 2 s"):
        catalog.search(r"(a|aa)+$", mode="regex")
    assert time.process_time() - started < 4.0  # 2 s budget for the whole catalog, not per tool


@pytest.mark.parametrize(
    "query",
    [pattern for pattern, _ in BOMBS]
    + ['"unbalanced', "NEAR(a b", "a OR OR b", "*", "col:value", "^", "a" * 2000],
)
def test_the_same_strings_are_plain_text_in_bm25(sample_catalog: Catalog, query: str) -> None:
    started = time.process_time()
    try:
        sample_catalog.search(query, mode="bm25")
    except InvalidQueryError as e:
        assert "\n" not in str(e)
    assert time.process_time() - started < 2.0
