"""What registering a toolkit trusts: the Python import root its implementations live under,
and the commands it may start.

A Python implementation (``package.module:attr``) runs with the host's rights the first time
its tool is called, so a manifest must say where its code lives (the toolkit's ``module``)
and every implementation must lie under it. Roots in the standard library (``os``,
``subprocess``, ``builtins``...) are refused: a manifest could otherwise hand an agent
``os:system``. A catalog opened with ``trust_any_module=True`` (CLI ``--trust-any-module``)
lifts both rules, for admins who write every manifest themselves.

Starting a command is trusted like importing a module: an ``mcp+stdio:COMMAND#TOOL``
implementation runs ``COMMAND`` with the host's rights on its tool's first call, so only
``register_mcp`` (CLI ``register --mcp-stdio``, where the admin types the command) or a
catalog opened with ``trust_any_module`` may register one; a manifest or a ``Toolkit`` built
in code may not.

Reading this process's environment is trusted the same way: a forwarding implementation
(``openapi+http:``, ``mcp+http:``) whose headers (or a stdio server's env and cwd) hold
``${NAME}`` references sends the values of those variables to a URL the implementation names.
Only an import the admin typed (``register --openapi/--mcp-http --header``, ``--mcp-stdio
--env``), recorded as such by the path the registration took (``store.writer`` writes the
toolkit's ``kind``), or a catalog opened with ``trust_any_module`` may resolve them; a
manifest or a ``Toolkit`` built in code that holds one is refused
(``toolcat.remote.secrets``, which can read the implementations; ``IMPORT_KINDS`` here).

The same rules hold at registration (``registry/``) and again at call time (``runtime/``),
so a catalog row edited behind toolcat's back cannot point a tool elsewhere.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ManifestError

if TYPE_CHECKING:
    from ..models import Toolkit, ToolkitHead

# Python 3.10+ lists its standard library; "builtins" and "__main__" are not importable roots
# a manifest should ever name either.
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"builtins", "__main__"}


def is_python_implementation(implementation: str | None) -> bool:
    """Whether ``implementation`` names Python code, not a tool of an MCP server
    (``mcp+stdio:``) or a REST operation (``openapi+http:``): those schemes have a ``+``."""
    return bool(implementation) and "+" not in str(implementation).split(":", 1)[0]


def module_of(implementation: str) -> str:
    """``package.module`` of ``package.module:attr``."""
    return implementation.split(":", 1)[0]


def under_root(module: str, root: str) -> bool:
    """Whether dotted ``module`` is ``root`` or inside it."""
    return module == root or module.startswith(root + ".")


def is_stdlib(module: str) -> bool:
    """Whether ``module`` belongs to Python's standard library (or is ``builtins``)."""
    return module.split(".", 1)[0] in _STDLIB


def root_problem(implementation: str | None, root: str | None) -> str | None:
    """Why ``implementation`` may not run under the toolkit import root ``root``, or ``None``.

    Only Python implementations are judged; ``trust_any_module`` callers skip this check.
    """
    if not implementation or not is_python_implementation(implementation):
        return None
    module = module_of(implementation)
    if root is None:
        return (
            f"{implementation!r} needs an import root: declare the toolkit's 'module' "
            "(the package its code lives in), or open the catalog with trust_any_module=True "
            "(toolcat --trust-any-module)"
        )
    if is_stdlib(root):
        return (
            f"the toolkit's module {root!r} is part of Python's standard library; "
            "tools must live in a package of their own (or open the catalog with "
            "trust_any_module=True: toolcat --trust-any-module)"
        )
    if not under_root(module, root):
        return f"{implementation!r} lies outside the toolkit's module {root!r}"
    return None


STDIO_PREFIX = "mcp+stdio:"


def command_problem(implementation: str | None) -> str | None:
    """Why a registration that is not an MCP import may not carry ``implementation`` (it
    starts a command), or ``None``."""
    if not implementation or not implementation.startswith(STDIO_PREFIX):
        return None
    command = implementation[len(STDIO_PREFIX) :].split("#", 1)[0]
    shown = command if len(command) <= 60 else command[:57] + "..."
    return (
        f"'mcp+stdio:' starts the command {shown!r} on the first call; only an MCP import "
        "(register --mcp-stdio) or a catalog opened with --trust-any-module "
        "(trust_any_module=True) may register one"
    )


IMPORT_KINDS = frozenset({"mcp", "openapi"})  # toolkit kinds whose references the admin typed


def check_import_roots(batch: Sequence[tuple[Toolkit | ToolkitHead, str | None]]) -> None:
    """Refuse a batch in which any Python implementation has no acceptable import root, or
    any implementation starts a command (``command_problem``). Forwarding implementations
    that read this process's environment are refused by ``toolcat.remote.secrets``.

    Raises:
        ManifestError: Every such implementation (up to the usual bound), naming file,
            toolkit, tool and field.
    """
    problems = [
        ManifestError(reason, file=source, toolkit=toolkit.name, tool=tool.name, field=field)
        for toolkit, source in batch
        for tool in toolkit.tools
        for reason, field in [_problem(tool.implementation, toolkit.module)]
        if reason
    ]
    if problems:
        raise ManifestError.of(problems)


def _problem(implementation: str | None, root: str | None) -> tuple[str | None, str]:
    command = command_problem(implementation)
    if command:
        return command, "implementation"
    reason = root_problem(implementation, root)
    field = "implementation" if reason is None or root is None or not is_stdlib(root) else "module"
    return reason, field
