"""Which forwarding implementations may read this process's environment.

An ``openapi+http:`` or ``mcp+`` implementation whose headers (or a stdio server's env and cwd)
hold ``${NAME}`` references sends those variables' values where the implementation says. Only
an import the admin typed (its toolkit's recorded ``kind`` is in
``toolcat.policy.trust.IMPORT_KINDS``) or a catalog opened with ``trust_any_module`` may
resolve them: registration refuses any other (``check_references``), and the runtime asks
again before every first call (``install`` gives it ``call_secret_problem`` through
``toolcat.runtime.remote``), so a row edited behind toolcat's back cannot either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ManifestError
from ..policy.trust import IMPORT_KINDS

if TYPE_CHECKING:
    from ..models import Toolkit, ToolkitHead


def secret_problem(implementation: str | None) -> str | None:
    """Why ``implementation`` may not be registered or called outside an import (it would
    resolve ``${NAME}`` references from this process's environment), or ``None``.

    The implementation is read with the parser its call uses, so no spelling (a JSON
    ``\\u0024``, a percent-encoded option) hides a reference from this check.
    """
    if not implementation:
        return None
    found = _references(implementation)
    if not found:
        return None
    field, names = found
    shown = ", ".join(f"${{{name}}}" for name in names)
    return (
        f"{field} references {shown}: only an import typed by the admin (register --openapi "
        "or --mcp-http with --header, --mcp-stdio with --env) or a catalog opened with "
        "--trust-any-module (trust_any_module=True) may send this process's environment "
        "variables; write the value, or $${NAME} for a literal ${NAME}"
    )


def call_secret_problem(implementation: str | None, kind: str | None, trusted: bool) -> str | None:
    """``secret_problem`` at call time: ``None`` for a toolkit registered by an import
    (``kind``, recorded by the registration path) or in a catalog that trusts any module."""
    if trusted or kind in IMPORT_KINDS:
        return None
    return secret_problem(implementation)


def _references(implementation: str) -> tuple[str, list[str]] | None:
    """(the first place of ``implementation`` that references variables, their names)."""
    from ..errors import ImportFailedError
    from .credentials import references

    places: list[tuple[str, str]] = []
    try:
        if implementation.startswith("openapi+http:"):
            from .openapi import parse_implementation as parse_operation

            operation = parse_operation(implementation)
            places = [(f"header {k!r}", v) for k, v in operation.headers.items()]
        elif implementation.startswith("mcp+"):
            from .mcp import parse_implementation as parse_remote

            endpoint = parse_remote(implementation).endpoint
            places = [(f"header {k!r}", v) for k, v in endpoint.headers]
            places += [(f"env {k!r}", v) for k, v in endpoint.env]
            places += [("cwd", endpoint.cwd)] if endpoint.cwd is not None else []
    except ImportFailedError:
        return None  # not callable either: its call fails on the same parse
    for place, value in places:
        names = references(value)
        if names:
            return place, names
    return None


def check_references(batch: Sequence[tuple[Toolkit | ToolkitHead, str | None]]) -> None:
    """Refuse a batch (not an import's) in which any implementation references this
    process's environment.

    Raises:
        ManifestError: Every such implementation, naming file, toolkit, tool and field.
    """
    problems = [
        ManifestError(
            reason, file=source, toolkit=toolkit.name, tool=tool.name, field="implementation"
        )
        for toolkit, source in batch
        for tool in toolkit.tools
        for reason in [secret_problem(tool.implementation)]
        if reason
    ]
    if problems:
        raise ManifestError.of(problems)
