"""The ``toolcat`` command: a thin click face over ``Catalog``, its commands grouped the way
the README's quick start is (``agent``, ``admin``, ``operator``).

Each command opens the catalog, calls one method and renders the answer, as text or (with
``--json``) in the documented JSON shapes. ``ToolcatError`` becomes one line on stderr and the
error's exit code, here and nowhere else.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from . import admin, agent, console, operator
from .output import PROCESS, ToolcatGroup, end_quietly


@click.group(cls=ToolcatGroup)
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="TOOLCAT_DB",
    help="Catalog file. Default: $TOOLCAT_DB, else ~/.local/share/toolcat/catalog.db.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option(
    "--deny",
    multiple=True,
    help="Policy: refuse (and hide) tools matching this rule, e.g. tag:destructive.",
)
@click.option("--allow", multiple=True, help="Policy: exempt tools matching this rule from --deny.")
@click.option(
    "--isolate",
    type=click.Choice(["thread", "process"]),
    help="Run tools in threads (fast; a timeout stops the wait, not the work, and not even "
    "the wait while a tool holds the GIL in a long C call) or in worker processes (a timeout "
    "kills the work). Default: process for `call`, thread otherwise.",
)
@click.option(
    "--trust-any-module",
    is_flag=True,
    help="Let implementations lie outside their toolkit's module, even in the standard "
    "library (os:system), and manifests start commands (mcp+stdio:). Only for catalogs whose "
    "every manifest you wrote.",
)
@click.version_option(package_name="toolcat")
@click.pass_context
def cli(
    ctx: click.Context,
    db: Path | None,
    debug: bool,
    deny: tuple[str, ...],
    allow: tuple[str, ...],
    isolate: str | None,
    trust_any_module: bool,
) -> None:
    """A searchable catalog of LLM tool definitions with deferred loading."""
    ctx.meta["toolcat.debug"] = debug


for module in (agent, admin, operator, console):
    for command in module.COMMANDS:
        cli.add_command(command)


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

    prefer_current_directory()  # modules beside you are found, as `python -m` finds them
    try:
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
