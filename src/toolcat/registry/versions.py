"""Versioning rules: PEP 440 order, the version after a given one, and what changed
between two versions of a toolkit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a read that sorts versions builds no models of its own
    from packaging.version import Version

    from ..models import RegisteredTool, Tool, ToolkitVersion

# What makes a tool "changed" for a caller: what it does, what it takes and where it runs.
CHANGE_KEYS = ("description", "parameters", "output_schema", "annotations", "implementation")


def next_version(version: str) -> str:
    """The version after ``version``: its last release number plus one."""
    from packaging.version import InvalidVersion, Version

    try:
        release = list(Version(version).release)
    except InvalidVersion:
        return f"{version}.1"
    release[-1] += 1
    return ".".join(map(str, release))


def sort_versions(found: Iterable[ToolkitVersion]) -> list[ToolkitVersion]:
    """Oldest first in PEP 440 order; strings that are no version come last."""
    from packaging.version import InvalidVersion, Version

    def order(v: ToolkitVersion) -> tuple[int, Version | str]:
        try:
            return (0, Version(v.version))
        except InvalidVersion:
            return (1, v.version)

    return sorted(found, key=order)


def tool_digest(tool: Tool | RegisteredTool) -> str:
    """A content hash of what a caller depends on (``CHANGE_KEYS``)."""
    from ..models import content_hash

    return content_hash(tool.model_dump(mode="json", include=set(CHANGE_KEYS)))


def tool_changes(
    new: Iterable[Tool | RegisteredTool], old: Iterable[Tool | RegisteredTool]
) -> dict[str, list[str]]:
    """Tools of ``new`` added, changed and removed against ``old``, by name."""
    before = {t.name: tool_digest(t) for t in old}
    after = {t.name: tool_digest(t) for t in new}
    return {
        "added": sorted(set(after) - set(before)),
        "changed": sorted(n for n in set(after) & set(before) if after[n] != before[n]),
        "removed": sorted(set(before) - set(after)),
    }
