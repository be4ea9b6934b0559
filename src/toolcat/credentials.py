"""Secrets by reference: ``${NAME}`` in a stored value, resolved where it is used.

The catalog stores what an admin typed (``Authorization=Bearer ${GITHUB_TOKEN}``), never the
secret itself; the process that makes a call resolves the reference from its own environment.
``$${NAME}`` stands for a literal ``${NAME}``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from .errors import ImportFailedError, ToolcatError

_REFERENCE = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MissingSecretError(ImportFailedError):
    """A ``${NAME}`` reference names an environment variable that is not set."""

    def __init__(self, variable: str, where: str) -> None:
        self.variable = variable
        self.where = where
        super().__init__(
            f"{where} references ${{{variable}}}, but the environment variable "
            f"{variable} is not set in this process; set it and try again"
        )


def references(value: str) -> list[str]:
    """The variable names ``value`` references, in order, without duplicates."""
    names: list[str] = []
    for match in _REFERENCE.finditer(value):
        if not match.group(1) and match.group(2) not in names:
            names.append(match.group(2))
    return names


def resolve(value: str, *, where: str, environ: Mapping[str, str] | None = None) -> str:
    """``value`` with each ``${NAME}`` replaced by that environment variable.

    Args:
        value: The stored text.
        where: What the value belongs to, for the error (``"header 'Authorization'"``).
        environ: The variables to read; the process environment by default.

    Raises:
        MissingSecretError: A referenced variable is not set.
    """
    env = os.environ if environ is None else environ

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return "${" + match.group(2) + "}"
        name = match.group(2)
        if name not in env:
            raise MissingSecretError(name, where)
        return env[name]

    return _REFERENCE.sub(substitute, value)


def resolve_all(
    values: Mapping[str, str], *, kind: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Every value of ``values`` resolved; ``kind`` names them in errors (``"header"``)."""
    return {
        key: resolve(value, where=f"{kind} {key!r}", environ=environ)
        for key, value in values.items()
    }


def parse_assignments(items: Iterable[str], *, option: str) -> dict[str, str]:
    """``NAME=VALUE`` strings (as typed after a CLI option) as a dict, in order.

    Raises:
        ToolcatError: An item has no ``=`` or an empty name; the message names ``option``.
    """
    parsed: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ToolcatError(f"{option} {item!r}: expected NAME=VALUE")
        parsed[name.strip()] = value
    return parsed
