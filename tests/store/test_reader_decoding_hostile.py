"""The stored JSON a search decodes for every hit not built yet (a definition and a tag list
per tool) goes through a faster path than ``json.loads``: the same value or the same error
for any text a damaged or forged catalog file could hold, and a bounded tag-list memo whose
lists callers may change without changing anyone else's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolcat.errors import CatalogDamagedError
from toolcat.store import reader

TEXTS: list[Any] = [
    '{"description": "d", "parameters": {}}',
    " {}",  # whitespace around: json.loads allows it
    "{} ",
    "\n[1]\t",
    "\ufeff{}",  # a byte-order mark: json.loads refuses it
    "{}x",  # extra data
    '{"a": 1}{"b": 2}',
    "",
    "   ",
    "{",
    '{"a": "\x01"}',  # a raw control character in a string
    '{"a": "\\ud800"}',  # a lone surrogate escape
    "NaN",
    "[1, Infinity, -Infinity]",
    "1e400",
    "-0",
    '"text"',
    "null",
    b'{"a": 1}',  # bytes: json.loads decodes them
    bytearray(b"[]"),
    None,
    5,
    3.5,
    "[" * 100_000,  # nesting past the recursion limit
    '{"a": ' * 50 + "1" + "}" * 50,
]


def outcome(decode: Any, text: Any) -> Any:
    try:
        return ("value", repr(decode(text)))
    except RecursionError:
        return ("error", "RecursionError")
    except (TypeError, ValueError) as e:
        return ("error", type(e).__name__, str(e))


@pytest.mark.parametrize("text", TEXTS, ids=lambda t: repr(t)[:30])
def test_the_fast_json_path_gives_json_loads_value_or_error(text: Any) -> None:
    assert outcome(reader._json, text) == outcome(json.loads, text)


@pytest.mark.parametrize(
    ("values", "strings"),
    [
        (["a", "b"], True),
        ([], True),
        ([type("Sub", (str,), {})("x")], True),  # as isinstance(item, str) says
        (["a", 1], False),
        ([None], False),
        ([["a"]], False),
        ([b"a"], False),
        (["a", {"b": 1}], False),
    ],
)
def test_every_item_a_string(values: list[Any], strings: bool) -> None:
    assert reader._strings(values) is strings
    assert strings is all(isinstance(v, str) for v in values)


def test_a_remembered_tag_list_is_a_new_list_every_time() -> None:
    text = '["memo-a", "memo-b"]'
    first = reader.decode_tags(text, "tool 'x'")
    first.append("changed by a caller")
    again = reader.decode_tags(text, "tool 'x'")
    assert again == ["memo-a", "memo-b"] and again is not first
    assert reader.decode_tags(text, "tool 'x'") is not again


@pytest.mark.parametrize(
    "text",
    ['["a", 1]', '{"a": 1}', '"a"', "[", None, 7, b'["a"]', '["a"] x', "\ufeff[]"],
    ids=repr,
)
def test_damaged_tags_are_damaged_whatever_was_remembered(text: Any) -> None:
    reader.decode_tags('["a"]', "tool 'x'")  # a good list remembered first
    if isinstance(text, bytes):  # json.loads reads bytes: valid, never remembered
        assert reader.decode_tags(text, "tool 'x'") == ["a"]
        assert text not in reader._tags_cache
        return
    with pytest.raises(CatalogDamagedError, match="tags are not a JSON list of strings"):
        reader.decode_tags(text, "tool 'x'")
    assert text not in reader._tags_cache


def test_the_tag_memo_is_bounded_in_entries_and_in_each_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reader, "_tags_cache", {})
    monkeypatch.setattr(reader, "TAGS_CACHE", 10)
    long = json.dumps(["x" * reader.MAX_CACHED_TAGS_CHARS])
    assert reader.decode_tags(long, "tool 'x'") == ["x" * reader.MAX_CACHED_TAGS_CHARS]
    assert long not in reader._tags_cache
    for i in range(50):
        assert reader.decode_tags(json.dumps([f"t{i}"]), "tool 'x'") == [f"t{i}"]
    assert len(reader._tags_cache) == 10


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        (' {"description": "d", "parameters": {}} ', None),  # whitespace: still valid
        ('{"description": "d", "parameters": {}}x', "is not JSON"),
        ("\ufeff{}", "is not JSON"),
        ('{"description": "d", "parameters": {}, "tags": ["a", 2]}', "holds a non-string"),
        ('{"description": "d", "parameters": {}, "examples": [null]}', "holds a non-string"),
        ('{"description": "d", "parameters": {}, "examples": "e"}', "field 'examples'"),
        ('{"description": "d"}', "has no 'parameters'"),
        ("[1]", "not a JSON object"),
    ],
)
def test_a_damaged_definition_is_named_as_before(definition: str, message: str | None) -> None:
    if message is None:
        assert reader.decode_definition(definition, "kit.t")["description"] == "d"
        return
    with pytest.raises(CatalogDamagedError, match=message):
        reader.decode_definition(definition, "kit.t")


@pytest.mark.parametrize("depth", [100_000, 10**6])
def test_json_nested_past_the_parser_is_damaged_not_a_recursion_error(depth: int) -> None:
    """Hostile: a forged catalog file's definition or tag list nested past the recursion
    limit (registration never stores one) is the same one-line damage as any other text
    that is not JSON, not a RecursionError out of a search."""
    nested = '{"description": "d", "parameters": {"a": ' + "[" * depth + "]" * depth + "}}"
    with pytest.raises(CatalogDamagedError, match=r"kit\.t.*not JSON"):
        reader.decode_definition(nested, "kit.t")
    with pytest.raises(CatalogDamagedError, match="not a JSON list"):
        reader.decode_tags("[" * depth + "]" * depth, "tool 'kit.t'")
