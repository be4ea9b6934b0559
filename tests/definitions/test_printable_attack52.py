"""attack52: ``escape``'s shortcut for text already one printable word. It must judge the
characters themselves, never what a ``str`` subclass says of itself, and always hand back a
plain ``str`` (a subclass's ``__str__`` would run again wherever the field is formatted)."""

from __future__ import annotations

from typing import Any

import pytest

from toolcat.definitions.printable import EscapingFormatter, by_character, escape


def by_the_loop(text: str, limit: int = 200, spaces: bool = False) -> str:
    """``escape`` before the shortcut: character by character."""
    return by_character(text, limit, spaces)


class SaysPrintable(str):
    def isprintable(self) -> bool:
        return True


class HidesItsBackslash(str):
    def __contains__(self, item: object) -> bool:
        return False


class SaysShort(str):
    def __len__(self) -> int:
        return 1


class FormatsAsSomethingElse(str):
    def __str__(self) -> str:
        return "ok\n2026-11-26T00:00:00.000Z admin tools/call delete_all ok\x1b[2J"

    def __format__(self, spec: str) -> str:
        return str(self)


class ReprIsASubclass:
    def __repr__(self) -> str:
        return FormatsAsSomethingElse("fine")


@pytest.mark.parametrize(
    ("value", "logged"),
    [
        (SaysPrintable("tool\nFORGED\x1b]0;x\x07"), "tool\\x0aFORGED\\x1b]0;x\\x07"),
        (HidesItsBackslash("a\\x0ab"), "a\\\\x0ab"),
        (SaysShort("a" * 300), "a" * 200 + "…"),
        (FormatsAsSomethingElse("ok"), "ok"),
        (ReprIsASubclass(), "fine"),
    ],
    ids=["isprintable", "contains", "len", "str", "repr"],
)
def test_a_str_subclass_cannot_talk_its_way_past_the_escaping(value: Any, logged: str) -> None:
    field = escape(value)
    assert type(field) is str
    assert field == logged
    assert f"{field}" == logged and "%s" % field == logged  # noqa: UP031 (logging formats so)


def test_the_formatter_escapes_a_subclass_argument() -> None:
    import logging

    record = logging.LogRecord("toolcat", logging.WARNING, "f", 1, "%s", None, None)
    record.args = (SaysPrintable("a\nb"),)
    assert EscapingFormatter("%(message)s").format(record) == "a\\x0ab"


HOSTILE = [
    "tools/call",
    "naïve-ünïcödé-名前",  # printable letters: kept as they are
    "e\u0301\u0301\u0301",  # combining marks are printable: kept
    "a\u200bb",  # zero width space (Cf)
    "a\u200db\ufeff",  # zero width joiner, BOM
    "\u202eevil\u202c",  # bidi override and pop
    "\u2066x\u2069",  # bidi isolates
    "line\u2028sep\u2029",  # line and paragraph separators
    "nbsp\u00a0ideo\u3000",  # spaces that are not the plain space
    "a b",  # the plain space: a field is one word
    "\ud800lone\udfff",  # lone surrogates
    "\U0001f600\U000e0041",  # an emoji, a tag character
    "x\x85y\x7f\x9b[2J",  # NEL, DEL, the C1 CSI
    "back\\slash",
    "a" * 199 + "\u200b",  # one escape past the limit at the end
    "a" * 200,
    "a" * 201,
]


@pytest.mark.parametrize("text", HOSTILE, ids=[f"text{i}" for i in range(len(HOSTILE))])
@pytest.mark.parametrize("spaces", [False, True], ids=["field", "message"])
def test_the_shortcut_writes_what_the_loop_writes(text: str, spaces: bool) -> None:
    for limit in (1, 10, 200, 1000):
        assert escape(text, limit, spaces=spaces) == by_the_loop(text, limit, spaces), limit
