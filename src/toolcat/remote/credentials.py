"""Secrets by reference: ``${NAME}`` in a stored value, resolved where it is used.

The catalog stores what an admin typed (``Authorization=Bearer ${GITHUB_TOKEN}``), never the
secret itself; the process that makes a call resolves the reference from its own environment.
``$${NAME}`` stands for a literal ``${NAME}``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from ..errors import ImportFailedError, ToolcatError

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


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as an HTTP header value, or ``None``. The reason never
    quotes the value: header values are where secrets go."""
    if not value.isascii():
        return "it holds a non-ASCII character"
    for char in value:
        if (char < " " and char != "\t") or char == "\x7f":
            return "it holds a newline" if char in "\r\n" else "it holds a control character"
    if value != value.strip(" \t"):
        return "it starts or ends with whitespace"
    return None


class UnsendableHeaderError(ImportFailedError):
    """A header's value (resolved from the environment) cannot be sent over HTTP. The message
    names the header and the variables it references, never the value."""

    def __init__(self, name: str, reason: str, where: str, variables: Iterable[str] = ()) -> None:
        self.header = name
        source = ", ".join(f"${{{v}}}" for v in variables)
        fix = f"fix the variable(s) it references ({source})" if source else "fix the value"
        super().__init__(f"{where}: header {name!r} cannot be sent: {reason}; {fix}")


def resolve_headers(
    headers: Mapping[str, str], *, where: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``headers`` with their ``${NAME}`` references resolved, each value checked to be
    sendable (so no HTTP library echoes a secret in its error).

    Raises:
        MissingSecretError: A referenced variable is not set.
        UnsendableHeaderError: A value cannot be sent (newline, control or non-ASCII
            character); the message names the header, never the value.
    """
    resolved: dict[str, str] = {}
    for name, stored in headers.items():
        value = resolve(stored, where=f"{where}: header {name!r}", environ=environ)
        reason = header_value_problem(value)
        if reason:
            raise UnsendableHeaderError(name, reason, where, references(stored))
        resolved[name] = value
    return resolved


def secret_values(
    stored: Mapping[str, str], resolved: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> list[str]:
    """What an error must never show of headers ``stored`` (as registered) once ``resolved``:
    each value, its longer words (the token of ``Bearer <token>``), and the value of every
    variable it references."""
    env = os.environ if environ is None else environ
    found: list[str] = []
    for name, value in resolved.items():
        found += [value, *(word for word in value.split() if len(word) >= 8)]
        found += [env[v] for v in references(stored.get(name, "")) if v in env]
    return found


def redacted(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of a secret (and its ``repr`` forms, as exception
    messages quote bytes) replaced by ``***``: the last guard before an error is shown."""
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        forms = {secret, repr(secret)[1:-1], repr(secret.encode("utf-8", "replace"))[2:-1]}
        for form in sorted(forms, key=len, reverse=True):
            text = text.replace(form, "***")
    return text


SECRET_NAME = re.compile(r"authorization|cookie|token|secret|key|password|passwd|credential", re.I)


def literal_secrets(headers: Mapping[str, str], env: Mapping[str, str] | None = None) -> list[str]:
    """Header and variable names whose value looks like a secret typed in full (no ``${NAME}``
    reference), which the catalog would store as typed."""
    found = [
        f"header {k!r}" for k, v in headers.items() if SECRET_NAME.search(k) and not references(v)
    ]
    found += [
        f"--env {k}"
        for k, v in (env or {}).items()
        if SECRET_NAME.search(k) and v and not references(v)
    ]
    return found
