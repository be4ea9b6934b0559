"""Which tools may be called, and so listed and searched: one rule engine for every path.

Rules are strings: ``tag:PATTERN``, ``toolkit:PATTERN``, a tool id pattern (``files.delete_file``,
``files.[^r]*``) or a bare tool name pattern. Patterns follow SQLite's ``GLOB``: ``*``, ``?``,
``[abc]``, ``[a-z]`` and ``[^abc]`` (``[!abc]`` is read the same way), case-sensitive. Each rule
is parsed once into a ``Rule`` that gives both the Python matcher (calls, ``Catalog.load``) and
the SQL ``GLOB`` clause (list, search), so what a rule hides it also refuses.

A tool is denied when a ``deny`` rule matches it and no ``allow`` rule does; then every guard
may veto a call by returning a reason (a string) or ``False``.

A rule that cannot do what it says is never accepted silently (a deny rule that matches
nothing allows everything). One that no tool could ever match (``bogus rule``: a space is in no
tool name) is a ``PolicyError`` when it is parsed. Against a catalog (``check_rules``), a bare
name that matches no tool but names a tag or a toolkit (``destructive`` for
``tag:destructive``) is an error too, and any other rule that matches no tool today is a
warning naming it: a tool of that name may be registered later.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..definitions.names import TOOL_NAME_RE, TOOLKIT_NAME_RE
from ..errors import PolicyError

if TYPE_CHECKING:  # list mode builds no models: a policy reaches it as SQL only
    from ..models import RegisteredTool

Guard = Callable[["RegisteredTool", dict[str, Any]], "str | bool | None"]

MAX_RULE_LENGTH = 200
MAX_NAME_LENGTH = 64  # of a tool, a toolkit and a tag (names.py, models.MAX_TAG_LENGTH)
_FIELDS = {"tag": "tag", "toolkit": "toolkit"}
_NAME_CHARS = "letters, digits, '_' and '-'"
_TOOLKIT_CHARS = "lower-case letters, digits, '_' and '-'"


@dataclass(frozen=True)
class Rule:
    """One parsed rule: which field it looks at and its pattern in both forms."""

    text: str
    field: str  # "tag", "toolkit", "id" (toolkit.name) or "name"
    glob: str  # for SQLite GLOB (negation as [^...])
    regex: re.Pattern[str]

    def matches(self, tool: RegisteredTool) -> bool:
        """Whether this rule matches ``tool`` (its own version's tags and toolkit)."""
        if self.field == "tag":
            return any(self.regex.fullmatch(tag) for tag in tool.tags)
        if self.field == "toolkit":
            return self.regex.fullmatch(tool.toolkit) is not None
        if self.field == "id":
            return self.regex.fullmatch(f"{tool.toolkit}.{tool.name}") is not None
        return self.regex.fullmatch(tool.name) is not None

    def sql(self) -> tuple[str, str]:
        """A SQL expression over ``t`` (the tools table) and its one parameter."""
        if self.field == "tag":
            return (
                "EXISTS (SELECT 1 FROM tool_tags g WHERE g.tool_id = t.id AND g.tag GLOB ?)",
                self.glob,
            )
        if self.field == "toolkit":
            return "t.toolkit GLOB ?", self.glob
        if self.field == "id":
            return "(t.toolkit || '.' || t.name) GLOB ?", self.glob
        return "t.name GLOB ?", self.glob


@lru_cache(maxsize=1024)
def parse_rule(rule: str) -> Rule:
    """Parse one rule.

    Raises:
        PolicyError: An empty or over-long rule, an unknown ``prefix:``, an unclosed ``[``,
            or a pattern no tool could match (a character no tool or toolkit name holds).
    """
    if not isinstance(rule, str):
        raise PolicyError(f"policy rule {rule!r} is not a string")
    if not rule.strip() or rule != rule.strip():
        raise PolicyError(f"policy rule {rule!r} is empty or has surrounding spaces")
    if len(rule) > MAX_RULE_LENGTH:
        raise PolicyError(f"policy rule {rule[:40]!r}… is longer than {MAX_RULE_LENGTH} characters")
    prefix, colon, rest = rule.partition(":")
    if colon:
        field = _FIELDS.get(prefix)
        if field is None:
            raise PolicyError(
                f"policy rule {rule!r}: unknown prefix {prefix + ':'!r}; "
                "use tag:, toolkit:, a tool id (toolkit.name) or a tool name"
            )
        pattern = rest
        if not pattern:
            raise PolicyError(f"policy rule {rule!r} has nothing after {prefix + ':'!r}")
    else:
        field, pattern = ("id" if "." in rule else "name"), rule
    pieces = _pieces(pattern, rule)
    _check_can_match(rule, field, pieces)
    glob = "".join(piece.glob for piece in pieces)
    regex = "".join(piece.regex for piece in pieces)
    return Rule(rule, field, glob, re.compile(regex, re.DOTALL))


@dataclass(frozen=True)
class _Piece:
    """One element of a pattern: ``*``, ``?``, a ``[...]`` class or a literal character."""

    glob: str
    regex: str
    literal: str | None = None  # the character, for a literal
    width: int = 1  # characters it takes (``*``: 0 or more)


def _check_can_match(rule: str, field: str, pieces: list[_Piece]) -> None:
    """Refuse a pattern no name of its field could match: too long, or a character (or a
    ``[...]`` class) that no tool or toolkit name holds."""
    longest = MAX_NAME_LENGTH * 2 + 1 if field == "id" else MAX_NAME_LENGTH  # toolkit.name
    if sum(piece.width for piece in pieces) > longest:
        raise PolicyError(
            f"policy rule {rule!r} cannot match any {field}: names have at most "
            f"{MAX_NAME_LENGTH} characters"
        )
    if field == "tag":
        return  # a tag may hold any character
    parts: list[tuple[str, list[_Piece]]] = [(field, pieces)]
    if field == "id":
        dots = [i for i, piece in enumerate(pieces) if piece.literal == "."]
        if len(dots) > 1:
            raise PolicyError(
                f"policy rule {rule!r} cannot match any tool: a tool id (toolkit.name) has "
                "one '.'; use tag:, toolkit:, a tool id or a tool name"
            )
        if dots:
            parts = [("toolkit", pieces[: dots[0]]), ("name", pieces[dots[0] + 1 :])]
    for part, found in parts:
        allowed, chars = (
            (TOOLKIT_NAME_RE, _TOOLKIT_CHARS) if part == "toolkit" else (TOOL_NAME_RE, _NAME_CHARS)
        )
        for piece in found:
            if piece.literal is not None and not allowed.fullmatch(piece.literal):
                problem = f"{piece.literal!r} is in no {_NOUN[part]}"
            elif piece.regex.startswith("[") and not any(
                re.fullmatch(piece.regex, c) for c in _ALPHABET[part]
            ):
                problem = f"{piece.glob!r} matches no character of a {_NOUN[part]}"
            else:
                continue
            raise PolicyError(
                f"policy rule {rule!r} cannot match any tool: {problem} ({chars}); "
                "use tag:PATTERN, toolkit:PATTERN, a tool id (toolkit.name) or a tool name"
            )


_NOUN = {"toolkit": "toolkit name", "name": "tool name", "id": "tool id"}
_ALPHABET = {
    "toolkit": "abcdefghijklmnopqrstuvwxyz0123456789_-",
    "name": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-",
    "id": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.",
}


def _pieces(pattern: str, rule: str) -> list[_Piece]:
    """``pattern`` as pieces, each in SQLite GLOB text and the equivalent Python regex."""
    pieces: list[_Piece] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            pieces.append(_Piece("*", ".*", width=0))
        elif c == "?":
            pieces.append(_Piece("?", "."))
        elif c == "[":
            j = i + 1
            negate = j < len(pattern) and pattern[j] in "^!"
            if negate:
                j += 1
            start = j
            if j < len(pattern) and pattern[j] == "]":  # a leading ] is a literal
                j += 1
            while j < len(pattern) and pattern[j] != "]":
                j += 1
            if j >= len(pattern):
                raise PolicyError(f"policy rule {rule!r}: '[' at position {i + 1} is not closed")
            body = pattern[start:j]
            parts: list[str] = []
            k = 0
            if body.startswith("]"):  # SQLite: a leading ] is a literal that starts no range
                parts.append(re.escape("]"))
                k = 1
            while k < len(body):
                if k + 2 < len(body) and body[k + 1] == "-":
                    low, high = body[k], body[k + 2]
                    if low > high:
                        raise PolicyError(f"policy rule {rule!r}: range {low}-{high} is reversed")
                    parts.append(f"{re.escape(low)}-{re.escape(high)}")
                    k += 3
                else:
                    parts.append(re.escape(body[k]))
                    k += 1
            mark = "^" if negate else ""
            pieces.append(_Piece(f"[{mark}{body}]", f"[{mark}{''.join(parts)}]"))
            i = j
        else:
            pieces.append(_Piece(c, re.escape(c), literal=c))
        i += 1
    return pieces


def rule_matches(rule: str, tool: RegisteredTool) -> bool:
    """Whether one policy rule matches ``tool``."""
    return parse_rule(rule).matches(tool)


def rules_sql(rules: Iterable[str]) -> tuple[str, list[Any]]:
    """One SQL expression true when any of ``rules`` matches the tool ``t`` (``0`` for none)."""
    parts = [parse_rule(rule).sql() for rule in rules]
    if not parts:
        return "0", []
    return "(" + " OR ".join(sql for sql, _ in parts) + ")", [value for _, value in parts]


@dataclass(frozen=True)
class Policy:
    """Allow/deny rules and guard callables for calls (see the module docstring).

    Example: ``Policy(deny=["tag:destructive"], allow=["files.write_file"])`` refuses every
    destructive tool but ``files.write_file``.

    Raises:
        PolicyError: A rule cannot be read.
    """

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    guards: tuple[Guard, ...] = ()

    def __post_init__(self) -> None:
        for field in ("allow", "deny", "guards"):
            value = getattr(self, field)
            if isinstance(value, str):  # Policy(deny="tag:x") would deny each character
                object.__setattr__(self, field, (value,))
            elif type(value) is not tuple:  # lists: a server keys caches by its scopes
                object.__setattr__(self, field, tuple(value))
        for rule in (*self.allow, *self.deny):
            parse_rule(rule)

    @classmethod
    def of(
        cls, allow: Iterable[str] = (), deny: Iterable[str] = (), guards: Iterable[Guard] = ()
    ) -> Policy:
        return cls(tuple(allow), tuple(deny), tuple(guards))

    def denying_rule(self, tool: RegisteredTool) -> str | None:
        """The deny rule that refuses ``tool``, or ``None`` if the rules allow it."""
        for rule in self.deny:
            if parse_rule(rule).matches(tool):
                if any(parse_rule(a).matches(tool) for a in self.allow):
                    return None
                return rule
        return None

    def sql(self) -> tuple[str, list[Any]]:
        """A SQL expression over ``t`` true for the tools these rules deny (``0`` for none)."""
        if not self.deny:
            return "0", []
        deny, deny_params = rules_sql(self.deny)
        allow, allow_params = rules_sql(self.allow)
        return f"({deny} AND NOT {allow})", [*deny_params, *allow_params]

    def rule_veto(self, tool: RegisteredTool) -> str | None:
        """Why the rules refuse every call to ``tool``, or ``None``."""
        rule = self.denying_rule(tool)
        if rule is None:
            return None
        return f"tool {tool.id!r} (version {tool.version}) is denied by policy rule {rule!r}"

    def guard_veto(self, tool: RegisteredTool, arguments: dict[str, Any]) -> str | None:
        """Why a guard refuses this call, or ``None``."""
        for guard in self.guards:
            name = getattr(guard, "__name__", repr(guard))
            try:
                verdict = guard(tool, arguments)
            except Exception as e:  # a broken guard refuses rather than lets through
                return f"guard {name} failed ({type(e).__name__}: {e}); the call was refused"
            if verdict is False:
                return f"guard {name} refused the call to {tool.id!r}"
            if isinstance(verdict, str):
                return f"guard {name} refused the call to {tool.id!r}: {verdict}"
        return None


def check_rules(
    policy: Policy,
    matches_a_tool: Callable[[Rule], bool],
    other_name: Callable[[Rule], str | None],
) -> list[str]:
    """Check ``policy``'s rules against a catalog; return a warning per rule that matches no
    tool today.

    Args:
        policy: The rules to check.
        matches_a_tool: Whether a rule matches any registered tool (any version).
        other_name: For a bare tool-name rule, the prefixed rule it may have meant
            (``tag:destructive``, ``toolkit:files``) when its pattern matches a tag or a
            toolkit name; ``None`` otherwise.

    Raises:
        PolicyError: A bare tool-name rule matches no tool but does match a tag or a toolkit
            name: it was almost certainly meant as one, and as written it allows everything.
    """
    warnings: list[str] = []
    for side, rules in (("deny", policy.deny), ("allow", policy.allow)):
        for text in dict.fromkeys(rules):
            rule = parse_rule(text)
            if matches_a_tool(rule):
                continue
            meant = other_name(rule) if rule.field == "name" else None
            if meant is not None:
                raise PolicyError(
                    f"{side} rule {text!r} matches no tool name but matches a "
                    f"{meant.partition(':')[0]}: write {meant!r} (or '*.{text}' for a tool "
                    "of that name still to be registered)"
                )
            warnings.append(f"{side} rule {text!r} matches no tool in this catalog")
    return warnings
