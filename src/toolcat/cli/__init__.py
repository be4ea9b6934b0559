"""The ``toolcat`` command: a thin click face over ``Catalog``, its commands grouped the way
the README's quick start is (``agent``, ``admin``, ``operator``).

Each command opens the catalog, calls one method and renders the answer, as text or (with
``--json``) in the documented JSON shapes. ``ToolcatError`` becomes one line on stderr and the
error's exit code, here and nowhere else.

``cli`` (the click group, ``root``) is imported on first use: a plain ``toolcat list``
(``quick``) runs without importing click at all.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from .text import PROCESS, end_quietly

if TYPE_CHECKING:
    from .root import cli as cli


def __getattr__(name: str) -> Any:
    if name == "cli":
        from .root import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console entry point. After a `call` whose tool is still running in a thread (timed
    out, unstoppable), the process leaves at once instead of waiting for it at exit."""
    PROCESS.own = True
    # onnxruntime (1.32 here) records telemetry events in a SQLite store in the user's cache
    # ($XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime), with four fsyncs and a thread
    # flushing it at exit: in a one-shot search, ~5 ms of CPU and tens of ms of wall time,
    # more on a busy disk (docs/benchmarks.md "Cold one-shot search"). The toolcat process
    # turns it off unless its user set the variable; a program that imports toolcat decides
    # for itself.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    from ..definitions.importpath import prefer_current_directory
    from .quick import quick_list

    prefer_current_directory()  # modules beside you are found, as `python -m` finds them
    try:
        code = quick_list(sys.argv[1:])
        if code is not None:
            sys.exit(code)
        from .root import cli

        cli.main(prog_name="toolcat")
    except SystemExit as e:
        if PROCESS.leave_at_once:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BrokenPipeError:
                os._exit(end_quietly())
            os._exit(e.code if isinstance(e.code, int) else 1)
        raise
