"""Which tools a search may return: the filters ``Catalog.search`` takes, by name."""

from __future__ import annotations

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
