"""``printable.escape``: outside text as one printable log field; the serve faces' formatter."""

from __future__ import annotations

import logging

import pytest

from toolcat.definitions.printable import EscapingFormatter, escape


@pytest.mark.parametrize(
    ("raw", "logged"),
    [
        ("tools/list", "tools/list"),
        ("a\nb c", "a\\x0ab\\x20c"),
        ("x\r\x1b[2J\x1b]0;t\x07", "x\\x0d\\x1b[2J\\x1b]0;t\\x07"),
        ("\u2028\u202e\x85", "\\u2028\\u202e\\x85"),
        ("back\\x0a", "back\\\\x0a"),  # a backslash of the client's is not an escape of ours
        ("", "''"),
        (None, "None"),
    ],
    ids=["plain", "newline-space", "ansi-osc", "separators-bidi", "backslash", "empty", "none"],
)
def test_escape_makes_one_printable_word(raw: object, logged: str) -> None:
    assert escape(raw) == logged


def test_escape_cuts_long_text() -> None:
    assert escape("\n" * 500, 40) == "\\x0a" * 10 + "…"


def test_the_formatter_keeps_a_record_on_one_line() -> None:
    record = logging.LogRecord("toolcat.mcp", logging.WARNING, "f", 1, "%s: %s", None, None)
    record.args = ("tool\nFORGED line", "\x1b]0;x\x07")
    line = EscapingFormatter("%(message)s").format(record)
    assert line == "tool\\x0aFORGED line: \\x1b]0;x\\x07"


@pytest.mark.slow
def test_the_fast_path_keeps_only_what_the_escaping_loop_would_keep() -> None:
    """Text already one printable word is returned as is: every code point the shortcut
    lets through must be one the character loop keeps unchanged, with and without
    ``spaces``."""
    for code in range(0x110000):
        c = chr(code)
        for spaces in (False, True):
            kept = c != "\\" and c.isprintable() and ((spaces and c == " ") or not c.isspace())
            assert (escape(c + "a", spaces=spaces) == c + "a") is kept, (hex(code), spaces)


def test_the_fast_path_still_cuts_at_the_limit() -> None:
    assert escape("a" * 81, 80) == "a" * 80 + "…"
    assert escape("a" * 80, 80) == "a" * 80
