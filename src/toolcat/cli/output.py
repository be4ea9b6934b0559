"""What the commands print, through click: JSON, one-line tool rows, and a ``ToolcatError``
turned into one line on stderr and its exit code (here and nowhere else).

Every line the commands write goes through ``echo`` (text) or ``emit_json`` (JSON), which
make text from outside printable (``text.printable``, ``text.json_text``); only a plain
``toolcat list`` writes the same text without click (``quick``).
"""

from __future__ import annotations

import sys
from typing import Any

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
from .text import (
    UNEXPECTED_EXIT,
    end_quietly,
    json_text,
    printable,
    reader_gone,
    unexpected_error_line,
)

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
                echo(f"error: {line}", err=True)
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
            echo(unexpected_error_line(e), err=True)
            ctx.exit(UNEXPECTED_EXIT)


def echo(text: str = "", *, err: bool = False, lines: bool = False) -> None:
    """Write one line (``lines``: one multi-line text) to stdout or stderr, made printable."""
    click.echo(printable(text, lines=lines), err=err)


def rewrite_line(text: str) -> None:
    """Show ``text`` on stderr in place of the terminal's current line (a progress line)."""
    click.echo(f"\r{printable(text)}\x1b[K", nl=False, err=True, color=True)


def emit_document(text: str) -> None:
    """Write a document as it is, to be redirected into a file (``toolcat manifest``: the
    manifest of a module the admin named, whose code runs here anyway)."""
    click.echo(text, nl=False)


def emit_json(value: Any) -> None:
    """Indented for a person at a terminal, compact (and faster) for a program."""
    click.echo(json_text(value, indent=2 if sys.stdout.isatty() else None))
