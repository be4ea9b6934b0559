"""Tag filters: which tags a tool must carry, may carry one of, or must not carry.

One rule everywhere (the API, the CLI's ``--tag``/``--any-tag``/``--exclude-tag``, MCP
``search_tools``, a server's scope and a tokens file's principals): a tool passes when it
carries **every** tag of ``tags``, **at least one** tag of ``any_tags`` (when given) and
**none** of ``exclude_tags``. A tool's tags are its own and its toolkit's; tags match
exactly (case included). Filters meet by ``&``: a server's scope and a caller's request
must both hold, so one ``TagFilter`` may hold several any-of groups.

Lists read better than an expression language in a YAML tokens file, a JSON tool call and a
shell alike, and need no quoting rules. Sits below the store, which builds its SQL here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAX_TAGS = 64  # per list: a filter is a short list of words, not a payload
MAX_TAG_LENGTH = 200


@dataclass(frozen=True)
class TagFilter:
    """A tag rule: ``all`` of these, at least one of each ``any`` group, ``none`` of these.

    Build one with ``TagFilter.of``; each tuple is sorted and deduplicated, so equal rules
    are equal values (and give equal SQL: search caches by it).
    """

    all: tuple[str, ...] = ()
    any: tuple[tuple[str, ...], ...] = ()
    none: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        tags: Iterable[str] | TagFilter = (),
        any_tags: Iterable[str] = (),
        exclude_tags: Iterable[str] = (),
    ) -> TagFilter:
        """The rule for these lists (blank entries ignored). ``tags`` may be a ``TagFilter``
        already: the lists then narrow it.

        Raises:
            InvalidQueryError: A tag is not a string, too long, or a list too long.
        """
        if _empty(tags) and _empty(any_tags) and _empty(exclude_tags):  # no filter asked
            return _NO_FILTER
        base = tags if isinstance(tags, TagFilter) else cls(all=_clean(tags, "tags"))
        group = _clean(any_tags, "any_tags")
        return base & cls(any=(group,) if group else (), none=_clean(exclude_tags, "exclude_tags"))

    def __and__(self, other: TagFilter) -> TagFilter:
        """Both rules at once."""
        return TagFilter(
            all=_merged(self.all, other.all),
            any=tuple(sorted(set(self.any) | set(other.any))),
            none=_merged(self.none, other.none),
        )

    def __bool__(self) -> bool:
        return bool(self.all or self.any or self.none)

    def refusal(self, tags: Iterable[str]) -> str | None:
        """Why a tool carrying ``tags`` fails this rule (a phrase), or ``None``."""
        have = set(tags)
        missing = [t for t in self.all if t not in have]
        if missing:
            return f"lacks the tag(s) {', '.join(missing)}"
        for group in self.any:
            if have.isdisjoint(group):
                return f"has none of the tags {', '.join(group)}"
        excluded = [t for t in self.none if t in have]
        if excluded:
            return f"carries the excluded tag(s) {', '.join(excluded)}"
        return None

    def matches(self, tags: Iterable[str]) -> bool:
        return self.refusal(tags) is None

    def sql(self) -> tuple[list[str], list[Any]]:
        """WHERE clauses over ``t`` (tools), ANDed by the caller, and their parameters. Each
        uses ``tool_tags``' keys (``(tag, tool_id)`` and ``tool_id``)."""
        clauses: list[str] = []
        params: list[Any] = []
        for tag in self.all:
            clauses.append(f"EXISTS ({_TAGGED})")
            params.append(tag)
        for group in self.any:
            clauses.append(f"EXISTS ({_tagged_in(group)})")
            params.extend(group)
        if self.none:
            clauses.append(f"NOT EXISTS ({_tagged_in(self.none)})")
            params.extend(self.none)
        return clauses, params

    def describe(self) -> str:
        """The rule in words, for a scope's messages and ``--help`` examples."""
        parts = [f"all of {', '.join(self.all)}"] if self.all else []
        parts += [f"one of {', '.join(group)}" for group in self.any]
        parts += [f"none of {', '.join(self.none)}"] if self.none else []
        return "; ".join(parts) or "any tags"


_NO_FILTER = TagFilter()

_TAGGED = "SELECT 1 FROM tool_tags g WHERE g.tag = ? AND g.tool_id = t.id"


def _tagged_in(tags: tuple[str, ...]) -> str:
    marks = ", ".join("?" * len(tags))
    return f"SELECT 1 FROM tool_tags g WHERE g.tool_id = t.id AND g.tag IN ({marks})"


def _merged(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(set(a) | set(b)))


def _empty(tags: Iterable[str] | TagFilter) -> bool:
    """Whether ``tags`` is an empty list, tuple or set, or a filter that asks nothing (what
    ``_clean`` would make nothing of, without walking it: a server asks this of every
    request's three lists)."""
    return type(tags) in (tuple, list, set, frozenset, TagFilter) and not tags


def _clean(tags: Iterable[str], field: str) -> tuple[str, ...]:
    from ..definitions.addresses import check_text
    from ..errors import InvalidQueryError

    if isinstance(tags, str):  # a lone string is one tag, not its characters
        tags = [tags]
    cleaned: set[str] = set()
    for tag in tags:
        if not isinstance(tag, str):
            raise InvalidQueryError(f"{field}: each tag is a string, not {type(tag).__name__}")
        tag = check_text(tag.strip(), f"tag in {field}")
        if not tag:
            continue
        if len(tag) > MAX_TAG_LENGTH or "\x00" in tag:
            raise InvalidQueryError(
                f"{field}: a tag is at most {MAX_TAG_LENGTH} characters, without NUL"
            )
        cleaned.add(tag)
    if len(cleaned) > MAX_TAGS:
        raise InvalidQueryError(f"{field}: at most {MAX_TAGS} tags, not {len(cleaned)}")
    return tuple(sorted(cleaned))
