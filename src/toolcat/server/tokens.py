"""Bearer tokens and the principals they stand for (``toolcat serve --http --tokens FILE``).

The file (YAML, or TOML when it ends in ``.toml``) maps each principal to its token and its
view of the catalog::

    principals:
      - name: data-team
        token: ${DATA_TEAM_TOKEN}      # a ${ENV} reference, or the token itself
        toolkits: [math, text]
        tags: []                       # every one of these
        any_tags: [read-only, lookup]  # at least one of these
        exclude_tags: [destructive]    # none of these
        deny: ["tag:destructive"]
        allow: []
        admin: false                   # true: may deprecate, activate, reindex in /ui

Tokens are compared in constant time and never logged; a request's scheme is matched
case-insensitively (RFC 9110). A malformed file refuses to start, naming the line.
"""

from __future__ import annotations

import hmac
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ToolcatError
from ..policy.rules import Policy
from ..policy.tags import TagFilter
from .scope import Scope

_ENV = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_FIELDS = {
    "name",
    "token",
    "toolkits",
    "tags",
    "any_tags",
    "exclude_tags",
    "allow",
    "deny",
    "admin",
}


class TokensFileError(ToolcatError):
    code = "INVALID_TOKENS_FILE"


@dataclass(frozen=True)
class Principal:
    """One identity: its name (safe to log), what it may see, and whether it may change the
    catalog through the web console (``admin: true`` in the tokens file; never ``--token``)."""

    name: str
    scope: Scope
    admin: bool = False


class Tokens:
    """Token → principal, compared in constant time."""

    def __init__(self, entries: list[tuple[bytes, Principal]]) -> None:
        self._entries = entries

    @classmethod
    def single(cls, token: str) -> Tokens:
        """The ``--token`` shorthand: one token, the server's whole scope."""
        return cls([(token.encode(), Principal("client", Scope(name="client")))])

    def principal(self, authorization: bytes) -> Principal | None:
        """The principal an ``Authorization`` header value names, or ``None``."""
        scheme, _, token = authorization.strip().partition(b" ")
        token = token.strip()
        if scheme.lower() != b"bearer" or not token:
            return None
        found = None
        for expected, principal in self._entries:  # every entry compared: no early exit
            if hmac.compare_digest(token, expected) and found is None:
                found = principal
        return found

    def principals(self) -> list[Principal]:
        """Every principal, in the file's order."""
        return [principal for _, principal in self._entries]

    def sign(self, name: str, message: bytes) -> bytes | None:
        """An HMAC of ``message`` keyed by principal ``name``'s token (None: no such
        principal): a console session cookie that any server holding the same tokens file
        checks, and that changing the token revokes."""
        for token, principal in self._entries:
            if principal.name == name:
                return hmac.new(token, message, "sha256").digest()
        return None

    def named(self, name: str) -> Principal | None:
        return next((p for _, p in self._entries if p.name == name), None)

    def __len__(self) -> int:
        return len(self._entries)


def load_tokens(path: Path) -> Tokens:
    """Read a tokens file; raises ``TokensFileError`` naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TokensFileError(f"{path}: cannot read the tokens file ({e.strerror})") from e
    data = _parse(path, text)
    items = data.get("principals") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise TokensFileError(f"{path}: expected a 'principals' list with at least one entry")
    entries: list[tuple[bytes, Principal]] = []
    unset: list[tuple[str, str, str]] = []  # (where, principal, variable): reported together
    names: set[str] = set()
    tokens: set[bytes] = set()
    for i, item in enumerate(items):
        where = f"{path}:{_line_of(text, item, i)}"
        if not isinstance(item, dict):
            raise TokensFileError(f"{where}: each principal is a mapping with 'name' and 'token'")
        unknown = sorted(set(item) - _FIELDS)
        if unknown:
            raise TokensFileError(f"{where}: unknown field(s) {', '.join(unknown)}")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise TokensFileError(f"{where}: 'name' must be a non-empty string")
        if name in names:
            raise TokensFileError(f"{where}: principal {name!r} appears twice")
        token = _token(where, name, item.get("token"))
        if isinstance(token, _Unset):
            unset.append((where, name, token.variable))
            names.add(name)
            continue
        if token in tokens:
            raise TokensFileError(f"{where}: principal {name!r} reuses another principal's token")
        lists = {}
        for key in ("toolkits", "tags", "any_tags", "exclude_tags", "allow", "deny"):
            value = item.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TokensFileError(
                    f"{where}: principal {name!r}: '{key}' must be a list of strings"
                )
            lists[key] = tuple(value)
        try:  # a bad tag or policy rule refuses to start, not each request
            TagFilter.of(lists["tags"], lists["any_tags"], lists["exclude_tags"])
            policy = Policy.of(allow=lists["allow"], deny=lists["deny"])
        except ToolcatError as e:
            raise TokensFileError(f"{where}: principal {name!r}: {e}") from e
        admin = item.get("admin", False)
        if not isinstance(admin, bool):
            raise TokensFileError(f"{where}: principal {name!r}: 'admin' must be true or false")
        names.add(name)
        tokens.add(token)
        scope = Scope(
            name=name,
            toolkits=lists["toolkits"],
            tags=lists["tags"],
            any_tags=lists["any_tags"],
            exclude_tags=lists["exclude_tags"],
            policy=policy,
        )
        entries.append((token, Principal(name, scope, admin)))
    if len(unset) == 1:
        where, name, variable = unset[0]
        raise TokensFileError(
            f"{where}: principal {name!r}: environment variable {variable} is not set"
        )
    if unset:
        listed = ", ".join(
            f"{variable} (line {where.rpartition(':')[2]}, principal {name!r})"
            for where, name, variable in unset
        )
        raise TokensFileError(f"{path}: {len(unset)} environment variables are not set: {listed}")
    return Tokens(entries)


@dataclass(frozen=True)
class _Unset:
    """A ``${VAR}`` token whose variable is not set (all of them are reported at once)."""

    variable: str


def _parse(path: Path, text: str) -> Any:
    if path.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise TokensFileError(f"{path}: not valid TOML ({e})") from e
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "not valid YAML"
        raise TokensFileError(f"{path}{line}: {problem}") from e


def _token(where: str, name: str, value: Any) -> bytes | _Unset:
    if not isinstance(value, str) or not value.strip():
        raise TokensFileError(f"{where}: principal {name!r}: 'token' must be a non-empty string")
    match = _ENV.match(value.strip())
    if match:
        resolved = os.environ.get(match.group(1))
        if not resolved:
            return _Unset(match.group(1))
        value = resolved
    assert isinstance(value, str)
    if len(value) < 8 or any(c.isspace() for c in value):
        raise TokensFileError(
            f"{where}: principal {name!r}: a token is at least 8 characters, without spaces"
        )
    return value.encode()


def _line_of(text: str, item: Any, index: int) -> int:
    """The line a principal starts on: found by its name, else its position (best effort)."""
    name = item.get("name") if isinstance(item, dict) else None
    lines = text.splitlines()
    if isinstance(name, str):
        pattern = re.compile(r"^\s*(-\s*)?name\s*[:=]\s*[\"']?" + re.escape(name) + r"[\"']?\s*$")
        for number, line in enumerate(lines, 1):
            if pattern.match(line):
                return number
    starts = [
        n for n, line in enumerate(lines, 1) if re.match(r"^\s*(-\s|\[\[principals\]\])", line)
    ]
    return starts[index] if index < len(starts) else 1
