"""A plain ``toolcat list`` without click: the first command a user or an agent runs, whose
time in a fresh process is mostly start-up (click, the other commands' modules and the
interpreter's teardown were ~37% of a cold ``list --json`` at 1M tools: docs/benchmarks.md,
"First `list` in a fresh process").

``quick_list`` takes only what click would read the same way: ``[--db FILE] list`` and
``list``'s own options, each value a non-empty word that does not start with ``-`` (after the
option or joined to it by ``=``), no single-valued option twice, ``--limit`` a plain number,
an existing ``--db`` a readable file, stdout a UTF-8 text stream. Anything else (``--help``,
any other global option, an unknown or repeated option, shell completion) and any error
before the first byte is written is left to click (``root``), which parses and reports it
as it always has: either path prints the same bytes and exits with the same status
(tests/cli/test_quick_list.py).
"""

from __future__ import annotations

import codecs
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..catalog import Catalog
from ..policy.rules import Policy
from .text import (
    PROCESS,
    UNEXPECTED_EXIT,
    end_quietly,
    json_text,
    list_lines,
    printable,
    reader_gone,
    unexpected_error_line,
)

_MANY = {"--tag": "tags", "--any-tag": "any_tags", "--exclude-tag": "exclude_tags"}
_ONE = {"--toolkit": "toolkit", "--limit": "limit", "--cursor": "cursor"}
_FLAGS = {"--include-deferred": "include_deferred", "--json": "as_json"}
_LIMIT_DIGITS = 18  # click reads longer numbers too (or refuses them): it decides those


def list_arguments(args: list[str]) -> tuple[Path | None, dict[str, Any]] | None:
    """The catalog path and the keyword arguments of ``list_`` that ``args`` give, when
    ``args`` are a plain ``toolcat list`` as click would read them; else None."""
    if sys.platform == "win32" or "_TOOLCAT_COMPLETE" in os.environ:
        return None
    words = iter(args)
    word = next(words, None)
    db: str | None = None
    if word is not None and word.partition("=")[0] == "--db":
        db = _value(word, words)
        if db is None:
            return None
        word = next(words, None)
    if word != "list":
        return None
    given: dict[str, Any] = {"tags": [], "any_tags": [], "exclude_tags": []}
    for word in words:
        name = word.partition("=")[0]
        if name in _FLAGS and word == name and _FLAGS[name] not in given:
            given[_FLAGS[name]] = True
        elif name in _MANY or (name in _ONE and _ONE[name] not in given):
            value = _value(word, words)
            if value is None:
                return None
            if name in _MANY:
                given[_MANY[name]].append(value)
            else:
                given[_ONE[name]] = value
        else:
            return None
    limit = given.get("limit")
    if limit is not None:
        if not (limit.isascii() and limit.isdigit() and len(limit) <= _LIMIT_DIGITS):
            return None
        given["limit"] = int(limit)
    for many in _MANY.values():
        given[many] = tuple(given[many])
    if db is None:
        db = os.environ.get("TOOLCAT_DB") or None  # click reads an empty variable as unset
    if db is not None and not _click_takes(db):
        return None
    return (None if db is None else Path(db)), given


def _value(word: str, words: Iterator[str]) -> str | None:
    """The value of the option ``word`` (joined by ``=`` or the next word), if plain."""
    _name, joined, value = word.partition("=")
    found = value if joined else next(words, None)
    if not found or found.startswith("-"):
        return None
    return found


def _click_takes(db: str) -> bool:
    """Whether ``click.Path(dir_okay=False)`` takes ``db`` as it is: a missing file (the
    catalog says so), or a readable one that is not a folder."""
    try:
        mode = os.stat(db).st_mode
    except OSError:
        return True
    except ValueError:  # a NUL in it
        return False
    return not stat.S_ISDIR(mode) and os.access(db, os.R_OK)


def _writes_as_click(stream: Any) -> bool:
    """Whether click would write to ``stream`` as it is (it re-wraps an ASCII one)."""
    encoding = getattr(stream, "encoding", None)
    return isinstance(encoding, str) and codecs.lookup(encoding).name == "utf-8"


def quick_list(args: list[str]) -> int | None:
    """Run ``toolcat list`` without click and return its exit status, or None (nothing
    written) when ``args`` are not a plain ``list`` or listing failed: click then runs them."""
    parsed = list_arguments(args)
    if parsed is None or not _writes_as_click(sys.stdout):
        return None
    path, options = parsed
    as_json = options.pop("as_json", False)
    try:
        text = _listing(path, options, as_json)
    except KeyboardInterrupt:  # as click says it
        sys.stderr.write("\nAborted!\n")
        return 1
    if text is None:
        return None  # click runs the command again, and says what failed as it always has
    PROCESS.leave_at_once = True  # nothing is left to finalise: no teardown (main)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        gone = reader_gone()
        code = end_quietly()
        return code if gone else 1
    except OSError as e:  # a full disk: what `ToolcatGroup` says of it
        sys.stderr.write(printable(unexpected_error_line(e)) + "\n")
        return UNEXPECTED_EXIT
    return 0


def _listing(path: Path | None, options: dict[str, Any], as_json: bool) -> str | None:
    """The text ``toolcat list`` prints, or None where listing failed."""
    try:
        # As `open_catalog` opens it with no global option given.
        catalog = Catalog(
            path,
            policy=Policy.of(allow=(), deny=()),
            isolation="thread",
            trust_any_module=False,
            create=False,
        )
        try:
            page = catalog.list_summaries(**options)
        finally:
            catalog.close()
        if as_json:
            return json_text(page, indent=2 if sys.stdout.isatty() else None) + "\n"
        return "".join(printable(line) + "\n" for line in list_lines(page))
    except Exception:
        return None
