"""Tools an outsider might write, for the attack tests: each reports more than it may."""

from __future__ import annotations

from toolcat import report_artifact, tool

__version__ = "1.0"


@tool
def spam_artifacts(count: int) -> int:
    """Report ``count`` tiny artifacts.

    Args:
        count: How many.
    """
    for i in range(count):
        report_artifact(f"a{i}.txt", "x")
    return count
