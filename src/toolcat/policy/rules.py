"""Which tools may be called, and so listed and searched: one rule engine for every path.

Rules are strings: ``tag:PATTERN``, ``toolkit:PATTERN``, a tool id pattern (``files.delete_file``,
``files.[^r]*``) or a bare tool name pattern. Patterns follow SQLite's ``GLOB``: ``*``, ``?``,
``[abc]``, ``[a-z]`` and ``[^abc]`` (``[!abc]`` is read the same way), case-sensitive. Each rule
is parsed once into a ``Rule`` that gives both the Python matcher (calls, ``Catalog.load``) and
the SQL ``GLOB`` clause (list, search), so what a rule hides it also refuses.

A tool is denied when a ``deny`` rule matches it and no ``allow`` rule does; then every guard
may veto a call by returning a reason (a string) or ``False``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..errors import PolicyError

if TYPE_CHECKING:  # list mode builds no models: a policy reaches it as SQL only
    from ..models import RegisteredTool

Guard = Callable[["RegisteredTool", dict[str, Any]], "str | bool | None"]

MAX_RULE_LENGTH = 200
_FIELDS = {"tag": "tag", "toolkit": "toolkit"}


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
        PolicyError: An empty or over-long rule, an unknown ``prefix:``, an unclosed ``[``.
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
    glob, regex = _translate(pattern, rule)
    return Rule(rule, field, glob, re.compile(regex, re.DOTALL))


def _translate(pattern: str, rule: str) -> tuple[str, str]:
    """SQLite GLOB text and the equivalent Python regex for ``pattern``."""
    glob: list[str] = []
    regex: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            glob.append("*")
            regex.append(".*")
        elif c == "?":
            glob.append("?")
            regex.append(".")
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
            glob.append("[" + ("^" if negate else "") + body + "]")
            parts: list[str] = []
            k = 0
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
            regex.append("[" + ("^" if negate else "") + "".join(parts) + "]")
            i = j
        else:
            glob.append(c)
            regex.append(re.escape(c))
        i += 1
    return "".join(glob), "".join(regex)


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
        for field in ("allow", "deny"):
            value = getattr(self, field)
            if isinstance(value, str):  # Policy(deny="tag:x") would deny each character
                object.__setattr__(self, field, (value,))
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
