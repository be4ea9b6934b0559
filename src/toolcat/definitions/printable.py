"""Text from outside (a client's JSON-RPC method, a tool's name, a principal, another
process's output) made safe for a log: one function for every field a log writes.

A log line is read by people and by programs that split it on spaces and newlines, so a
newline in a client's method could forge a line naming another principal and tool, and an
escape sequence could rewrite the terminal showing it. ``escape`` keeps printable characters
and writes everything else (controls, spaces, line and paragraph separators, bidi overrides,
and the backslash itself) as a Python-style escape, so the original stays readable and a field
is always one word on one line.
"""

from __future__ import annotations

import logging
from typing import Any

MAX_FIELD = 200


def escape(value: Any, limit: int = MAX_FIELD, *, spaces: bool = False) -> str:
    """``value`` (text, or anything else as its ``repr``) as one printable word of at most
    ``limit`` characters (then ``…``); ``spaces=True`` keeps plain spaces (a message)."""
    # Its characters as a plain str: a subclass's own isprintable, __len__ or __contains__
    # would judge it, and its __str__ would run again wherever the field is formatted.
    text = str.__str__(value if isinstance(value, str) else repr(value))
    if not text:
        return "''"
    # Already one printable word (the common case: an access log line is four of them).
    # ``isprintable`` is False for every whitespace but the plain space.
    if (
        len(text) <= limit
        and text.isprintable()
        and "\\" not in text
        and (spaces or " " not in text)
    ):
        return text
    return by_character(text, limit, spaces)


def by_character(text: str, limit: int, spaces: bool) -> str:
    """``escape``'s long way, character by character (what its shortcut must agree with)."""
    out: list[str] = []
    size = 0
    for c in text:
        if c == "\\":
            piece = "\\\\"
        elif c.isprintable() and ((spaces and c == " ") or not c.isspace()):
            piece = c
        elif ord(c) < 0x100:
            piece = f"\\x{ord(c):02x}"
        elif ord(c) < 0x10000:
            piece = f"\\u{ord(c):04x}"
        else:
            piece = f"\\U{ord(c):08x}"
        size += len(piece)
        if size > limit:
            out.append("…")
            break
        out.append(piece)
    return "".join(out)


class EscapingFormatter(logging.Formatter):
    """A formatter whose every record is one printable line: the message, its arguments
    and any traceback escaped (newlines in a traceback stay ``\\n``)."""

    def format(self, record: logging.LogRecord) -> str:
        return escape(super().format(record), 100_000, spaces=True)


def install(name: str = "toolcat", level: int = logging.WARNING) -> None:
    """Write ``name``'s records (and its children's) to stderr through ``EscapingFormatter``,
    unless the embedding program configured that logger already."""
    logger = logging.getLogger(name)
    if logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter("%(message)s"))
    handler.setLevel(level)
    logger.addHandler(handler)
    logger.propagate = False
