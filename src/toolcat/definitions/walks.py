"""Walks over JSON trees in C (``_walks.c``): the plain-JSON check, a schema's remote
references and its texts for the index, the Draft 7 fast path, each the same answer as its
Python (here, models.py, text/documents.py, schema_draft7_plain.py;
tests/definitions/test_walks.py compares them). The Python stays for whatever the C
declines (anything but exact dicts, lists and strs where the Python would run someone's
code) and where the extension was not built (``setup.py`` builds it where there is a C
compiler)."""

from __future__ import annotations

import math
from typing import Any

try:
    from . import _walks
except ImportError:  # no C compiler where toolcat was installed
    _walks = None  # type: ignore[assignment]

NATIVE = True  # tests switch it off to compare the Python
MIN_INT, MAX_INT = -(2**63), 2**63 - 1  # the signed 64-bit range JSON readers expect


def compiled() -> Any | None:
    """The ``_walks`` module, or None (not built, or switched off)."""
    return _walks if NATIVE else None


def plain_json(value: Any, max_depth: int, depth: int = 0) -> bool:
    """Whether ``value`` (at key-path length ``depth``) is plain JSON: exact dicts with text
    keys, lists, text without a lone surrogate, 64-bit ints, finite floats, booleans and
    None, no container deeper than ``max_depth``. Anything else answers False."""
    native = compiled()
    if native is not None and depth == 0:
        return bool(native.plain_json(value, max_depth))
    kind = type(value)
    if (kind is dict or kind is list) and depth >= max_depth:
        return False  # its children lie deeper than allowed (or it is empty: walked anyway)
    if kind is dict:
        for key, child in value.items():
            if type(key) is not str or not (key.isascii() or is_text(key)):
                return False
            child_kind = type(child)
            if child_kind is str:
                if not (child.isascii() or is_text(child)):
                    return False
            elif child_kind is bool or child is None:
                continue
            elif not plain_json(child, max_depth, depth + 1):
                return False
        return True
    if kind is list:
        for child in value:
            if type(child) is str:
                if not (child.isascii() or is_text(child)):
                    return False
            elif not plain_json(child, max_depth, depth + 1):
                return False
        return True
    if kind is str:
        return value.isascii() or is_text(value)
    if kind is int:
        return bool(MIN_INT <= value <= MAX_INT)
    if kind is float:
        return math.isfinite(value)
    return kind is bool or value is None


def is_text(value: str) -> bool:
    """Whether ``value`` can be written as UTF-8: JSON and YAML decode lone surrogates
    (``"\\ud800"``) into strings that cannot."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
