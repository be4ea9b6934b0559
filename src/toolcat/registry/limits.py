"""Bounds on what a manifest may be: a regular file of bounded size, parsed without aliases
or duplicate keys, holding only values that round-trip through JSON.

A manifest comes from someone the admin may not fully trust (a package, an MCP server, a
colleague), so nothing in it may hang the reader (a FIFO, ``/dev/zero``), blow up memory (a
50 MB file, YAML "billion laughs"), or store something that breaks later calls (``NaN`` is
stored as ``null``, 5,000-digit integers and 300-deep nesting crash validators, a lone
surrogate cannot be written to SQLite). Each problem names the key path where it sits.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterator
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from ..definitions import walks
from ..definitions.walks import is_text
from ..errors import ManifestError

MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # the sample manifests are 2-10 KiB; 4 MiB is ~10k tools
# Imports (MCP servers, OpenAPI documents) have no file to measure: their definitions are.
# The largest tool of the shared OpenAPI documents is 9 KiB of JSON, the toolkits 65 KiB.
MAX_IMPORTED_TOOL_BYTES = 1024 * 1024
MAX_IMPORTED_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64  # nesting of mappings and lists, the manifest's own levels included
MAX_INT = walks.MAX_INT  # integers must fit a signed 64-bit value, as JSON readers expect
MIN_INT = walks.MIN_INT
MAX_INT_CHARS = 20  # a longer integer literal is out of range: not even converted


class NotJson:
    """A parsed value JSON cannot carry (``NaN``, an out-of-range integer), kept as text so the
    walk can say where it sits."""

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason


def read_manifest_bytes(path: Path, limit: int = MAX_MANIFEST_BYTES) -> bytes:
    """The bytes of a manifest file: a regular file of at most ``limit`` bytes.

    The file is checked before it is opened and opened non-blocking, so a FIFO, a device or a
    directory is refused at once instead of hanging or reading forever.

    Raises:
        ManifestError: Not a regular file, too large, or unreadable.
    """
    try:
        info = os.stat(path)
    except OSError as e:
        raise ManifestError(f"cannot read manifest: {e.strerror or e}", file=str(path)) from e
    _check_regular(info.st_mode, path)
    if info.st_size > limit:
        raise _too_large(path, info.st_size, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ManifestError(f"cannot read manifest: {e.strerror or e}", file=str(path)) from e
    try:
        _check_regular(os.fstat(fd).st_mode, path)  # swapped for a FIFO since the stat
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise ManifestError(f"cannot read manifest: {e.strerror or e}", file=str(path)) from e
    finally:
        os.close(fd)
    if size > limit:  # grew since the stat
        raise _too_large(path, size, limit, exact=False)
    return b"".join(chunks)


def _check_regular(mode: int, path: Path) -> None:
    if stat.S_ISDIR(mode):
        raise ManifestError("is a directory, not a manifest file", file=str(path))
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "not a regular file"
        )
        raise ManifestError(f"is {kind}; a manifest must be a regular file", file=str(path))


def _too_large(path: Path, size: int, limit: int, *, exact: bool = True) -> ManifestError:
    shown = f"{size} bytes" if exact else f"more than {limit} bytes"
    return ManifestError(
        f"is {shown}; manifests are limited to {limit // (1024 * 1024)} MiB", file=str(path)
    )


def decode_manifest(raw: bytes, path: Path) -> str:
    """UTF-8 text of a manifest (a BOM is dropped); invalid bytes are a ``ManifestError``."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ManifestError(
            f"not UTF-8 text: invalid byte at offset {e.start}", file=str(path)
        ) from e


def check_number_text(text: str) -> int | NotJson:
    """An integer literal as ``int``, or a ``NotJson`` when it is out of 64-bit range (too long
    literals are not even converted: ``int()`` of 5,000 digits is slow, and refused by
    Python 3.11+)."""
    digits = text.lstrip("+-")
    if len(digits.lstrip("0")) > MAX_INT_CHARS:
        return NotJson(text, f"integer of {len(digits)} digits is out of the 64-bit range")
    value = int(text)
    if not MIN_INT <= value <= MAX_INT:
        return NotJson(text, "integer is out of the 64-bit range")
    return value


def value_problems(data: Any) -> Iterator[tuple[list[Any], str, bool]]:
    """(key path, reason, blocking) for each value that cannot round-trip through JSON.

    ``blocking`` problems (too deep, not a JSON value, a number out of range) stop further
    validation; others (a lone surrogate) still let the definition be checked.
    """
    if not plain_json(data):
        yield from walk_values(data)


def walk_values(data: Any) -> Iterator[tuple[list[Any], str, bool]]:
    """``value_problems``, every value visited with its key path."""
    stack: list[tuple[list[Any], Any]] = [([], data)]
    while stack:
        path, value = stack.pop()
        if len(path) > MAX_DEPTH:
            yield path, f"nested deeper than {MAX_DEPTH} levels", True
            continue
        if isinstance(value, NotJson):
            yield path, value.reason, True
        elif isinstance(value, str):
            if not is_text(value):
                yield path, "text holds a lone surrogate (not valid Unicode)", False
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, int):
            if not MIN_INT <= value <= MAX_INT:
                yield path, "integer is out of the 64-bit range", True
        elif isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                yield (
                    path,
                    f"{value} is not a JSON number (NaN and Infinity cannot be stored)",
                    True,
                )
        elif isinstance(value, dict):
            children: list[tuple[list[Any], Any]] = []
            for key, child in value.items():
                if not isinstance(key, str):
                    yield [*path, key], f"key {key!r} is not a string", True
                    continue
                if not is_text(key):
                    yield path, f"key {key!r} holds a lone surrogate (not valid Unicode)", False
                children.append(([*path, key], child))
            stack.extend(reversed(children))
        elif isinstance(value, (list, tuple)):
            stack.extend(reversed([([*path, i], child) for i, child in enumerate(value)]))
        else:
            kind = (
                "a date or time (quote it to make it text)"
                if isinstance(value, (date, datetime, time))
                else f"a {type(value).__name__}"
            )
            yield path, f"{kind} is not a JSON value", True


def plain_json(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` (at key-path length ``depth``) holds nothing ``walk_values`` would
    report: the common case, checked without building a key path per value (a fifth of the
    cost). Anything unusual (a tuple, a date, a ``NotJson``) answers False, and the full
    walk then finds and locates the problem (``walks.plain_json``: in C where it was built)."""
    return walks.plain_json(value, MAX_DEPTH, depth)
