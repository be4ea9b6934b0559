"""The strings agents and admins hand back to the catalog: tool addresses, toolkit
references and list cursors."""

from __future__ import annotations

import base64
import binascii
import json

from .errors import InvalidQueryError, UnknownToolError, UnknownToolkitError
from .models import TOOLKIT_NAME_RE


def parse_address(address: str) -> tuple[str | None, str, str | None]:
    """Split a tool address into (toolkit, name, version).

    Accepted forms: ``name``, ``toolkit.name``, ``name@version`` and
    ``toolkit.name@version`` (the last two pin a registered version, active or not).
    """
    base, at, version = address.strip().partition("@")
    toolkit, dot, name = base.partition(".")
    if not dot:
        toolkit, name = "", base
    if (at and not version) or "@" in version or "." in name or not name:
        raise UnknownToolError(address)
    return (toolkit or None), name, (version or None)


def parse_toolkit_ref(ref: str) -> tuple[str, str | None]:
    """Split ``toolkit`` or ``toolkit@version``."""
    name, at, version = ref.strip().partition("@")
    if not TOOLKIT_NAME_RE.match(name) or (at and not version):
        raise UnknownToolkitError(f"{ref!r} is not a toolkit name or toolkit@version")
    return name, (version or None)


def encode_cursor(toolkit: str, name: str) -> str:
    """An opaque cursor for the list page that starts after ``toolkit.name``."""
    raw = json.dumps([toolkit, name], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    """(toolkit, name) from ``encode_cursor``; anything else is an ``InvalidQueryError``."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeError):
        value = None
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise InvalidQueryError(f"invalid cursor {cursor!r}: pass back a next_cursor unchanged")
    return value[0], value[1]
