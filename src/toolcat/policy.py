"""Which tools may be called, and so listed and searched.

Rules are strings: ``tag:NAME``, ``toolkit:NAME``, a tool id (``files.delete_file``) or a
bare tool name, each with optional glob characters (``*``, ``?``, ``[...]``; case-sensitive).
A tool is denied when a ``deny`` rule matches it and no ``allow`` rule does; then every
guard may veto a call by returning a reason (a string) or ``False``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from .models import RegisteredTool

Guard = Callable[[RegisteredTool, dict[str, Any]], "str | bool | None"]


def rule_matches(rule: str, tool: RegisteredTool) -> bool:
    """Whether one policy rule matches ``tool``."""
    if rule.startswith("tag:"):
        return any(fnmatchcase(tag, rule[4:]) for tag in tool.tags)
    if rule.startswith("toolkit:"):
        return fnmatchcase(tool.toolkit, rule[8:])
    return fnmatchcase(tool.id if "." in rule else tool.name, rule)


@dataclass(frozen=True)
class Policy:
    """Allow/deny rules and guard callables for calls (see the module docstring).

    Example: ``Policy(deny=["tag:destructive"], allow=["files.write_file"])`` refuses every
    destructive tool but ``files.write_file``.
    """

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    guards: tuple[Guard, ...] = ()

    @classmethod
    def of(
        cls, allow: Iterable[str] = (), deny: Iterable[str] = (), guards: Iterable[Guard] = ()
    ) -> Policy:
        return cls(tuple(allow), tuple(deny), tuple(guards))

    def denying_rule(self, tool: RegisteredTool) -> str | None:
        """The deny rule that refuses ``tool``, or ``None`` if the rules allow it."""
        for rule in self.deny:
            if rule_matches(rule, tool):
                if any(rule_matches(a, tool) for a in self.allow):
                    return None
                return rule
        return None

    def rule_veto(self, tool: RegisteredTool) -> str | None:
        """Why the rules refuse every call to ``tool``, or ``None``."""
        rule = self.denying_rule(tool)
        if rule is None:
            return None
        return f"tool {tool.id!r} is denied by policy rule {rule!r}"

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
