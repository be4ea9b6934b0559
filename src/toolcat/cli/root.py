"""The ``toolcat`` click group: the global options, and each command's module imported when
the command is asked for."""

from __future__ import annotations

import importlib
from pathlib import Path

import click

from .output import ToolcatGroup

# The commands of each module. A module is imported when one of its commands runs (or when
# `--help`, a mistyped name or a caller asks for all of them): `toolcat --debug list` loads
# neither the admin's, the operator's nor the console's commands, nor what they import.
MODULE_COMMANDS = {
    "agent": ["list", "search", "show", "call", "export"],
    "admin": [
        "init", "register", "manifest", "versions", "toolkits", "deprecate", "activate",
        "remove", "check", "reindex", "status",
    ],
    "operator": ["serve", "usage", "cache", "eval"],
    "console": ["ui"],
}  # fmt: skip
COMMAND_MODULES = {name: module for module, names in MODULE_COMMANDS.items() for name in names}


class LazyGroup(ToolcatGroup):
    """The ``toolcat`` group, whose commands are imported on first use (click's documented
    lazy-loading pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({**self.commands, **COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            if cmd_name in COMMAND_MODULES:
                self.load(COMMAND_MODULES[cmd_name])
            else:  # click's "Did you mean ...?" picks from the loaded commands
                self.load_all()
        return self.commands.get(cmd_name)

    def load(self, module_name: str) -> None:
        """Add the commands of ``toolcat.cli.<module_name>``."""
        module = importlib.import_module(f".{module_name}", __package__)
        for command in module.COMMANDS:
            if command.name not in self.commands:
                self.add_command(command)

    def load_all(self) -> None:
        for module_name in MODULE_COMMANDS:
            self.load(module_name)


@click.group(cls=LazyGroup)
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
