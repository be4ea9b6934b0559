"""What one caller of the server may see, search and call.

A ``Scope`` is the server's ``--toolkit``/``--tag``/``--any-tag``/``--exclude-tag``/``--allow``/
``--deny`` selection, narrowed
by the caller's principal when a tokens file names one. The same ``allows`` test bounds
``tools/list``, ``search_tools`` and every call path (a tool's own name, ``call_tool``, a
pinned ``toolkit.name@version``), so what a caller cannot see it cannot call either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..definitions.names import TOOLKIT_NAME_RE
from ..models import RegisteredTool
from ..policy.rules import Policy
from ..policy.tags import TagFilter
from ..store.writer import same_version


@dataclass(frozen=True)
class Scope:
    """A selection of catalog tools.

    Attributes:
        name: Who the scope belongs to (``server`` or a principal's name), for messages.
        toolkits: Only these toolkits (``name`` or ``name@version``); empty = every toolkit.
        tags: Only tools carrying all of these tags.
        any_tags: Only tools carrying at least one of these tags.
        exclude_tags: Only tools carrying none of these tags.
        policy: Allow/deny rules on top of the catalog's own.
    """

    name: str = "server"
    toolkits: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    policy: Policy = field(default_factory=Policy)
    any_tags: tuple[str, ...] = ()
    exclude_tags: tuple[str, ...] = ()

    parent: Scope | None = None

    def narrowed(self, other: Scope) -> Scope:
        """``other`` inside this scope: a tool must be in both (each with its own rules, so
        a principal's ``allow`` never lifts the server's ``deny``)."""
        return Scope(
            other.name,
            other.toolkits,
            other.tags,
            other.policy,
            other.any_tags,
            other.exclude_tags,
            parent=self,
        )

    @property
    def selects(self) -> bool:
        """Whether this level's own rules leave out anything (a principal's scope that
        selects nothing sees what the server's sees)."""
        own = (self.toolkits, self.tags, self.any_tags, self.exclude_tags)
        return any(own) or bool(self.policy.allow or self.policy.deny)

    @property
    def own_tag_filter(self) -> TagFilter:
        return TagFilter.of(self.tags, self.any_tags, self.exclude_tags)

    @property
    def tag_filter(self) -> TagFilter:
        """The tag rule of every level at once (the catalog filters on it itself)."""
        mine = self.own_tag_filter
        return self.parent.tag_filter & mine if self.parent else mine

    @property
    def single_toolkit(self) -> str | None:
        """The one toolkit the catalog can filter on itself, if there is exactly one."""
        if len(self.toolkits) == 1:
            return self.toolkits[0]
        return self.parent.single_toolkit if self.parent and not self.toolkits else None

    @property
    def search_policies(self) -> tuple[Policy, ...]:
        """Each level's rules, and its toolkits as rules (``toolkit:name``), for the catalog
        to filter its search by: it then ranks within the scope instead of the scope
        picking from its first hits. Versions and toolkit names that are not plain names
        stay to ``allows`` (``exact_in_search`` is then false)."""
        mine = self.parent.search_policies if self.parent else ()
        rules = [self.policy] if self.policy.deny else []
        names = [_toolkit_name(t) for t in self.toolkits]
        if names and all(TOOLKIT_NAME_RE.fullmatch(n) for n in names):
            rules.append(Policy(deny=("toolkit:*",), allow=tuple(f"toolkit:{n}" for n in names)))
        return (*mine, *rules)

    @property
    def exact_in_search(self) -> bool:
        """Whether ``search_policies`` and ``tag_filter`` leave out every tool ``allows``
        refuses (no toolkit version or unusual toolkit name to check afterwards)."""
        plain = all("@" not in t and TOOLKIT_NAME_RE.fullmatch(t) for t in self.toolkits)
        return plain and (self.parent is None or self.parent.exact_in_search)

    def allows(self, tool: RegisteredTool) -> bool:
        return self.refusal(tool) is None

    def refusal(self, tool: RegisteredTool) -> str | None:
        """Why ``tool`` is outside this scope (one line naming the level whose rule refuses
        it: the server or the principal), or ``None``. For the operator's log: a caller is
        told only what a tool that does not exist gets."""
        if self.parent is not None:
            refused = self.parent.refusal(tool)
            if refused is not None:
                return refused
        if self.toolkits and not any(_toolkit_matches(t, tool) for t in self.toolkits):
            return f"{tool.id!r} is not in the toolkits of {self.level}"
        tags_refused = self.own_tag_filter.refusal(tool.tags)
        if tags_refused is not None:
            wanted = self.own_tag_filter.describe()
            return f"{tool.id!r} {tags_refused}: {self.level} requires {wanted}"
        rule = self.policy.denying_rule(tool)
        if rule is not None:
            return f"{tool.id!r} is denied by rule {rule!r} of {self.level}"
        return None

    @property
    def level(self) -> str:
        """Whose selection this is, for messages: the server's or a principal's."""
        return "this server" if self.parent is None else f"principal {self.name!r}"


def _toolkit_name(selector: str) -> str:
    return selector.split("@", 1)[0]


def _toolkit_matches(selector: str, tool: RegisteredTool) -> bool:
    name, _, version = selector.partition("@")
    if name != tool.toolkit:
        return False
    if not version:
        return True
    return same_version(tool.version, version)
