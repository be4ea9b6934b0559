"""Which tools a search may return: the filters ``Catalog.search`` takes, by name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..policy.tags import TagFilter

if TYPE_CHECKING:
    from ..policy.rules import Policy


@dataclass(frozen=True)
class Scope:
    """A search's scope: the tag rule ``tags``, ``toolkit`` (``name`` or ``name@version``),
    deferred tools or not, tools the catalog's policy denies or not, and ``policies`` whose
    allow/deny rules hide tools whatever ``include_denied`` says."""

    tags: TagFilter = field(default_factory=TagFilter)
    toolkit: str | None = None
    include_deferred: bool = True
    include_denied: bool = False
    policies: tuple[Policy, ...] = ()

    @classmethod
    def of(
        cls,
        tags: Iterable[str] | TagFilter,
        any_tags: Iterable[str],
        exclude_tags: Iterable[str],
        toolkit: str | None,
        include_deferred: bool,
        include_denied: bool,
        policies: Iterable[Policy] = (),
    ) -> Scope:
        """The scope of ``Catalog.list``'s and ``Catalog.search``'s keyword arguments."""
        tag_filter = TagFilter.of(tags, any_tags, exclude_tags)
        return cls(tag_filter, toolkit, include_deferred, include_denied, tuple(policies))
