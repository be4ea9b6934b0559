"""What the commands print: JSON, one-line tool rows, and a ``ToolcatError`` turned into one
line on stderr and its exit code (here and nowhere else)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from ..errors import (
    ImportFailedError,
    InvalidArgumentsError,
    ManifestError,
    ToolcatError,
    ToolDeniedError,
    ToolFailedError,
    ToolTimeoutError,
    UnknownToolError,
)

if TYPE_CHECKING:
    pass

CALL_EXIT_CODES = {  # a failed ToolResult's error_code -> `toolcat call`'s exit code
    "UNKNOWN_TOOL": UnknownToolError.exit_code,
    "IMPORT_FAILED": ImportFailedError.exit_code,
    "INVALID_ARGUMENTS": InvalidArgumentsError.exit_code,
    "TOOL_DENIED": ToolDeniedError.exit_code,
    "TIMEOUT": ToolTimeoutError.exit_code,
    "TOOL_ERROR": ToolFailedError.exit_code,
}


class ToolcatGroup(click.Group):
    """Turns ``ToolcatError`` into one line on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ToolcatError as e:
            if ctx.meta.get("toolcat.debug"):
                raise
            if ctx.meta.get("toolcat.json"):  # a program reads stdout: the error is JSON there
                error: dict[str, Any] = {"code": e.code, "message": str(e)}
                if isinstance(e, ManifestError):
                    error["problems"] = e.to_dict()
                emit_json({"error": error})
            lines = e.lines() if isinstance(e, ManifestError) else [str(e)]
            for line in lines:
                click.echo(f"error: {line}", err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            if not reader_gone():
                raise
            ctx.exit(end_quietly())
        except Exception as e:  # a bug: still one line, and the way to see more
            if ctx.meta.get("toolcat.debug"):
                raise
            text = " ".join(str(e).split())[:300]
            click.echo(
                f"error: unexpected {type(e).__name__}: {text} (a bug in toolcat; "
                "--debug shows the traceback)",
                err=True,
            )
            ctx.exit(ToolcatError.exit_code)


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


def emit_json(value: Any) -> None:
    """Indented for a person at a terminal, compact (and faster) for a program."""
    indent = 2 if sys.stdout.isatty() else None
    click.echo(json.dumps(value, indent=indent, ensure_ascii=False))


def plural(count: int, word: str) -> str:
    """``1 tool``, ``2 tools``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def one_line(text: str, width: int = 80) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= width else first[: width - 1] + "…"


def tool_line(tool_id: str, description: str, defer_loading: bool) -> str:
    deferred = " [deferred]" if defer_loading else ""
    return f"{tool_id:<36} {one_line(description, 70)}{deferred}"


@dataclasses.dataclass
class ProcessState:
    """What ``main`` knows about the process it runs in."""

    # This process runs one command and exits (not a caller's process that runs ``cli.main``
    # or a test runner, whose objects must stay collectable).
    own: bool = False
    # Leave without waiting for threads at exit (a `call` whose tool still runs, a search).
    leave_at_once: bool = False


PROCESS = ProcessState()
