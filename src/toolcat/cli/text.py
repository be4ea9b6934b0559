"""What the commands print, and the process they print from, without click: the one place
where text from outside (a tool's name, description, result and events, a client's query, a
state file's fields, an error naming any of them) is made printable, so that an escape
sequence in it cannot reach the terminal of whoever reads the output (retitle the window,
clear the screen, hide text behind bidi overrides).

``output`` writes through click; ``quick`` (a plain ``toolcat list``) writes the same text
without importing click.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

from ..errors import ToolcatError

CLOSED_PIPE_EXIT = 128 + 13
"""The exit status a shell reports for ``cat`` or ``git`` stopped by a closed pipe (SIGPIPE)."""


def reader_gone() -> bool:
    """Whether the reader of our stdout or stderr went away (``toolcat status | head -1``),
    as against a broken pipe of our own (a worker's, a forwarded server's), which is a bug."""
    import select

    if not hasattr(select, "poll"):
        return True
    poll = select.poll()
    for fd in own_fds():
        poll.register(fd, 0)
    return any(mask & select.POLLERR for _fd, mask in poll.poll(0))


def own_fds() -> list[int]:
    """The file descriptors of the process's stdout and stderr (none under a test runner
    that replaced them)."""
    fds = []
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                fds.append(stream.fileno())
        except (OSError, ValueError):
            continue
    return fds


def end_quietly() -> int:
    """After the reader closed the pipe: nothing more can be said to it, so nothing is (no
    traceback, no error line); the process's own streams point at /dev/null so that the
    flush at exit does not fail again. Returns the exit status to leave with."""
    if PROCESS.own:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in own_fds():
            os.dup2(devnull, fd)
        os.close(devnull)
    return CLOSED_PIPE_EXIT


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` safe to show on a terminal: printable text as it is; text holding anything
    else (controls, C1 controls such as CSI, line and paragraph separators, bidi overrides,
    other invisible formatting) in ``printable.escape``'s Python-style escapes, its
    backslashes doubled so that the escapes stay unambiguous. Plain spaces stay; with
    ``lines`` (text that is multi-line by design: a description, a result) so do newlines
    (``\\r\\n`` too) and tabs."""
    if not lines:
        if text.isprintable():
            return text
        # Imported here: it brings in logging, which a command printing plain text never needs.
        from ..definitions.printable import escape

        return escape(text, sys.maxsize, spaces=True)
    if text.replace("\n", "").replace("\t", "").isprintable():
        return text
    return "\n".join(
        "\t".join(printable(cell) for cell in line.split("\t"))
        for line in text.replace("\r\n", "\n").split("\n")
    )


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON that carries no invisible character raw: ``json.dumps`` escapes C0
    controls but leaves C1 controls, U+2028/2029 and bidi overrides as they are, which a
    terminal (or a JavaScript reader) acts on; they are written as ``\\uXXXX`` too."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    if text.isascii() or text.replace("\n", "").isprintable():
        return text
    # Outside strings JSON is ASCII, and in strings every such character may be escaped.
    return "".join(c if c.isprintable() or c == "\n" else _json_escape(c) for c in text)


def _json_escape(c: str) -> str:
    code = ord(c)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a surrogate pair, as JSON writes characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def plural(count: int, word: str) -> str:
    """``1 tool``, ``2 tools``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def one_line(text: str, width: int = 80) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= width else first[: width - 1] + "…"


def tool_line(tool_id: str, description: str, defer_loading: bool) -> str:
    deferred = " [deferred]" if defer_loading else ""
    return f"{tool_id:<36} {one_line(description, 70)}{deferred}"


def list_lines(page: dict[str, Any]) -> list[str]:
    """``toolcat list``'s text: a line per tool, then the count, the revision and the cursor
    of the next page."""
    lines = [tool_line(t["id"], t["description"], t["defer_loading"]) for t in page["tools"]]
    footer = f"{plural(len(page['tools']), 'tool')}, revision {page['revision']}"
    if page["next_cursor"]:
        footer += f"; more with --cursor {page['next_cursor']}"
    return [*lines, footer]


@dataclasses.dataclass
class ProcessState:
    """What ``main`` knows about the process it runs in."""

    # This process runs one command and exits (not a caller's process that runs ``cli.main``
    # or a test runner, whose objects must stay collectable).
    own: bool = False
    # Leave without waiting for threads at exit (a `call` whose tool still runs, a search).
    leave_at_once: bool = False


PROCESS = ProcessState()


def unexpected_error_line(error: Exception) -> str:
    """The one line a command's unexpected exception (a bug) prints on stderr."""
    text = " ".join(str(error).split())[:300]
    return (
        f"error: unexpected {type(error).__name__}: {text} (a bug in toolcat; "
        "--debug shows the traceback)"
    )


UNEXPECTED_EXIT = ToolcatError.exit_code
