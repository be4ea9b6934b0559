"""Attacks on ``store.rows.tags_json``, which replaced ``json.dumps(list(tags))`` where a
worker makes a tool's row and where the writer checks a worker's answer (attack55).

Tags are a manifest's text: any code point, escapes, quotes, lone surrogates. The JSON must be
``json.dumps``'s to the byte, and ``check_rows`` must refuse an answer whose tags are not
text or whose JSON is not theirs, in whatever other spelling it comes.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.helpers import toolkit_data
from toolcat.models import Toolkit
from toolcat.store.rows import ToolkitRows, check_rows, rows_of, tags_json

SPECIAL = ['"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\x80"]
SPECIAL += ["é", "\u2028", "\u2029", "\ufeff", "\ud800", "\udfff", "😀", "\U0010ffff", " "]


def random_tag(rng: random.Random) -> str:
    pieces = [
        rng.choice(SPECIAL) if rng.random() < 0.5 else chr(rng.randrange(0x110000))
        for _ in range(rng.randint(0, 12))
    ]
    return "".join(pieces)


def test_tags_json_is_json_dumps_for_any_list_of_text() -> None:
    rng = random.Random(55)
    for _ in range(3000):
        tags = [random_tag(rng) for _ in range(rng.randint(0, 6))]
        assert tags_json(tags) == json.dumps(tags)
        assert tags_json(tuple(tags)) == json.dumps(tags)
        assert tags_json(iter(tags)) == json.dumps(tags)


def test_tags_json_of_str_subclasses_is_json_dumps_of_their_text() -> None:
    class Tag(str):
        def __str__(self) -> str:
            return "not this"

        def __repr__(self) -> str:
            return "nor this"

    tags = [Tag("read-only"), Tag('quo"te'), Tag("é")]
    assert tags_json(tags) == json.dumps(tags) == '["read-only", "quo\\"te", "\\u00e9"]'


@pytest.mark.parametrize("tag", [1, None, b"x", 1.5, True, ["nested"]])
def test_tags_json_refuses_what_is_not_text(tag: Any) -> None:
    with pytest.raises(TypeError):
        tags_json(["ok", tag])


def made() -> tuple[Toolkit, ToolkitRows]:
    data = toolkit_data()
    data["tools"][0]["tags"] = ["é", 'quo"te', "a\u2028b", "😀", "\\back"]
    toolkit = Toolkit.model_validate(data)
    rows = rows_of(toolkit)
    assert check_rows(toolkit, rows) is None
    return toolkit, rows


def with_first(rows: ToolkitRows, **changes: Any) -> ToolkitRows:
    return ToolkitRows(rows.digest, [rows.tools[0]._replace(**changes), *rows.tools[1:]])


def test_rows_made_hold_json_dumps_of_their_tags() -> None:
    _, rows = made()
    for row in rows.tools:
        assert row.tags_json == json.dumps(list(row.tags))
        assert json.loads(row.tags_json) == list(row.tags)


def other_spellings(tags: tuple[str, ...]) -> list[str]:
    """The same tags in JSON that is not ``json.dumps``'s: what a garbled answer could hold."""
    return [
        json.dumps(list(tags), separators=(",", ":")),
        json.dumps(list(tags), ensure_ascii=False),
        json.dumps(list(tags), indent=1),
        json.dumps(list(tags)).replace("\\u00e9", "\\u00E9"),
        json.dumps(list(tags)) + " ",
        " " + json.dumps(list(tags)),
        json.dumps(list(reversed(tags))),
        json.dumps([*tags, tags[0]]),
        json.dumps(list(tags[:-1])),
        "[" + ", ".join(json.dumps(t) for t in tags) + ",]",
        json.dumps({"tags": list(tags)}),
        "null",
        "",
    ]


def test_check_rows_refuses_tags_json_spelled_otherwise() -> None:
    toolkit, rows = made()
    tags = rows.tools[0].tags
    for spelling in other_spellings(tags):
        problem = check_rows(toolkit, with_first(rows, tags_json=spelling))
        assert problem is not None and "tags do not match" in problem, spelling


@pytest.mark.parametrize(
    "tags",
    [
        ("read-only", 1),
        ("read-only", None),
        ("read-only", b"network"),
        ("read-only", ["network"]),
    ],
    ids=["int", "none", "bytes", "list"],
)
def test_check_rows_refuses_tags_that_are_not_text(tags: tuple[Any, ...]) -> None:
    toolkit, rows = made()
    # even with the JSON json.dumps would make of them
    spelled = json.dumps([t.decode() if isinstance(t, bytes) else t for t in tags])
    problem = check_rows(toolkit, with_first(rows, tags=tags, tags_json=spelled))
    assert problem is not None and "not text" in problem


def test_check_rows_refuses_a_tag_that_is_a_str_subclass() -> None:
    class Tag(str):
        pass

    toolkit, rows = made()
    tags = tuple(Tag(t) for t in rows.tools[0].tags)
    assert check_rows(toolkit, with_first(rows, tags=tags)) is not None


@pytest.mark.parametrize("tags", [None, 5, 2.5], ids=["none", "int", "float"])
def test_check_rows_refuses_tags_that_are_not_a_tuple(tags: Any) -> None:
    toolkit, rows = made()
    problem = check_rows(toolkit, with_first(rows, tags=tags, tags_json="[]"))
    assert problem is not None


def test_check_rows_refuses_tags_of_another_kind_whose_json_differs() -> None:
    toolkit, rows = made()
    tags = rows.tools[0].tags
    for other in ("".join(tags), {t: 1 for t in tags[:1]}, frozenset(tags[:1])):
        assert check_rows(toolkit, with_first(rows, tags=other)) is not None
