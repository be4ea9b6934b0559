"""The strings agents and admins hand back to the catalog: tool addresses, toolkit
references and list cursors."""

from __future__ import annotations

import base64
import binascii
import json
import re

from ..errors import InvalidQueryError, UnknownToolError, UnknownToolkitError
from .names import TOOL_NAME_RE, TOOLKIT_NAME_RE

# The characters of a PEP 440 version (normalised or not); matched whole, like every name.
VERSION_RE = re.compile(r"[A-Za-z0-9.!+_-]{1,64}")


def parse_address(address: str) -> tuple[str | None, str, str | None]:
    """Split a tool address into (toolkit, name, version).

    Accepted forms: ``name``, ``toolkit.name``, ``name@version`` and
    ``toolkit.name@version`` (the last two pin a registered version, active or not). Each part
    must match its naming rule whole: nothing is stripped, so ``files\n`` names no toolkit.
    """
    base, at, version = address.partition("@")
    toolkit, dot, name = base.partition(".")
    if not dot:
        toolkit, name = "", base
    if (
        (at and not VERSION_RE.fullmatch(version))
        or (dot and not TOOLKIT_NAME_RE.fullmatch(toolkit))
        or not TOOL_NAME_RE.fullmatch(name)
    ):
        raise UnknownToolError(address)
    return (toolkit or None), name, (version or None)


def parse_toolkit_ref(ref: str) -> tuple[str, str | None]:
    """Split ``toolkit`` or ``toolkit@version``, each part matched whole (nothing stripped)."""
    name, at, version = ref.partition("@")
    if not TOOLKIT_NAME_RE.fullmatch(name) or (at and not VERSION_RE.fullmatch(version)):
        raise UnknownToolkitError(f"{ref!r} is not a toolkit name or toolkit@version")
    return name, (version or None)


def check_text(value: str, what: str = "query") -> str:
    """``value`` unchanged if it is valid Unicode text; ``InvalidQueryError`` otherwise.

    Lone surrogates come from invalid bytes on the command line (Python decodes argv with
    ``surrogateescape``) or from JSON ``\\udXXX`` escapes; SQLite cannot store them.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidQueryError(
            f"the {what} is not valid UTF-8 text (invalid byte or lone surrogate at "
            f"position {e.start})"
        ) from None
    return value


def encode_cursor(toolkit: str, name: str) -> str:
    """An opaque cursor for the list page that starts after ``toolkit.name``."""
    raw = json.dumps([toolkit, name], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


MAX_CURSOR_CHARS = 1000


def decode_cursor(cursor: str) -> tuple[str, str]:
    """(toolkit, name) from ``encode_cursor``; anything else is an ``InvalidQueryError``."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        # A cursor we made holds two names; a long one (deeply nested JSON...) is not ours.
        value = (
            json.loads(base64.urlsafe_b64decode(padded.encode()))
            if len(cursor) <= MAX_CURSOR_CHARS
            else None
        )
    except (binascii.Error, ValueError, UnicodeError, RecursionError):
        value = None
    if not (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], str)
        and TOOLKIT_NAME_RE.fullmatch(value[0])
        and TOOL_NAME_RE.fullmatch(value[1])
    ):
        shown = cursor if len(cursor) <= 60 else cursor[:60] + "…"
        raise InvalidQueryError(f"invalid cursor {shown!r}: pass back a next_cursor unchanged")
    return value[0], value[1]
