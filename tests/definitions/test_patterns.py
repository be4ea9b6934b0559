"""toolcat.definitions.patterns: bounds on compiled size and matching time, checked on the real
engine."""

from __future__ import annotations

import time

import pytest

from toolcat.definitions import patterns


@pytest.mark.parametrize(
    "pattern",
    [
        "(?:(?:a{1000}){1000}){1000}",
        "(?:a{4294967294})",
        "(?:a{100}){101}",
        "a{10001}",
        "a{10001,}",
        "(?:ab){5001}",
        "(?i)(?:a{100}){101}",
        "(?x)(?:a # (\n{100}){200}",
        "(?:[abc]{100}|b){101}",
    ],
)
def test_repetition_is_bounded_before_compiling(pattern: str) -> None:
    started = time.process_time()
    with pytest.raises(patterns.PatternError, match="repeats too much"):
        patterns.compile(pattern)
    assert time.process_time() - started < 0.5


@pytest.mark.parametrize(
    "pattern",
    [r"\d{4}-\d{2}-\d{2}", ".{0,1000}", "(?:a{100}){100}", r"(?:\d{1,3}\.){3}\d{1,3}", "a*b+c?"],
)
def test_ordinary_patterns_compile(pattern: str) -> None:
    assert patterns.compile(pattern).pattern == pattern


def test_length_and_syntax() -> None:
    with pytest.raises(patterns.PatternError, match="limit is 10"):
        patterns.compile("a" * 11, max_length=10)
    with pytest.raises(patterns.PatternError, match="invalid regular expression"):
        patterns.compile("(")
    with pytest.raises(patterns.PatternError, match="text"):
        patterns.compile(b"a")  # type: ignore[arg-type]


def test_matching_has_a_time_budget() -> None:
    compiled = patterns.compile(r"(a|aa)+$")
    started = time.process_time()
    with pytest.raises(patterns.PatternTimeout, match=r"ran longer than 0\.2 s"):
        patterns.search(compiled, "a" * 51 + "!", budget=0.2)
    with pytest.raises(patterns.PatternTimeout):
        list(patterns.finditer(compiled, "a" * 51 + "!", budget=0.2))
    with pytest.raises(patterns.PatternTimeout):
        patterns.subn(compiled, "x", "a" * 51 + "!", budget=0.2)
    with pytest.raises(patterns.PatternTimeout):
        patterns.check_pattern(r"^(a|aa)+$", "a" * 51 + "!", budget=0.2)
    assert time.process_time() - started < 2.5
    with pytest.raises(patterns.PatternTimeout):
        patterns.search(compiled, "a", budget=0)


def test_results() -> None:
    assert patterns.check_pattern(r"^\d+$", "123")
    assert not patterns.check_pattern(r"^\d+$", "12a")
    assert patterns.check_pattern("b", "abc")  # JSON Schema: anywhere in the value
    assert [m.group() for m in patterns.finditer(patterns.compile(r"\d"), "a1b2")] == ["1", "2"]
    assert patterns.subn(patterns.compile(r"(\w)(\d)"), r"\2\1", "a1 b2") == ("1a 2b", 2)
    with pytest.raises(patterns.PatternError, match="invalid replacement"):
        patterns.subn(patterns.compile("a"), r"\2", "a")
    with pytest.raises(patterns.PatternError, match="would pass 100"):
        patterns.subn(patterns.compile("a"), "xxxxx", "a" * 30, max_output=100)


def test_the_fallback_estimate_is_cautious() -> None:
    assert patterns._estimate("a{100}b{101}") > patterns.MAX_COST
    assert patterns._estimate(r"\d{4}-\d{2}") == 8
