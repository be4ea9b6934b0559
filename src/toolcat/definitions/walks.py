"""Walks over JSON trees in C (``_walks.c``): the manifest's plain-JSON check, a schema's
remote references and its texts for the index, each the same answer as its Python
(registry/limits.py, models.py, text/documents.py; tests/definitions/test_walks.py compares
them). The Python stays for whatever the C declines (anything but exact dicts, lists and
strs where the Python would run someone's code) and where the extension was not built
(``setup.py`` builds it where there is a C compiler)."""

from __future__ import annotations

from typing import Any

try:
    from . import _walks
except ImportError:  # no C compiler where toolcat was installed
    _walks = None  # type: ignore[assignment]

NATIVE = True  # tests switch it off to compare the Python


def compiled() -> Any | None:
    """The ``_walks`` module, or None (not built, or switched off)."""
    return _walks if NATIVE else None
