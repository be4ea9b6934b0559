"""Tool definitions in the shapes LLM APIs take (``providers``), and the names of those shapes
(``formats``, light enough for the CLI's options).

``toolcat.export`` keeps its names: each is imported from ``providers`` on first use (PEP 562),
so the CLI can read ``FORMATS`` without loading the exporting code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .formats import FORMATS as FORMATS

if TYPE_CHECKING:
    from .providers import (
        ANTHROPIC_MAX_PATTERN,
        ANTHROPIC_MAX_SEARCHABLE,
        ANTHROPIC_SEARCH_TOOLS,
        NAME_RULES,
        OPENAI_NAMES,
        SEARCH_TOOL_DESCRIPTION,
        SEARCH_TOOL_NAME,
        SEARCH_TOOL_PARAMETERS,
        ExportedTools,
        NameRule,
        export_tools,
        gemini_schema,
        mcp_tool,
        object_schema,
        registered_tools,
        tool_items,
    )

__all__ = [
    "ANTHROPIC_MAX_PATTERN",
    "ANTHROPIC_MAX_SEARCHABLE",
    "ANTHROPIC_SEARCH_TOOLS",
    "FORMATS",
    "NAME_RULES",
    "OPENAI_NAMES",
    "SEARCH_TOOL_DESCRIPTION",
    "SEARCH_TOOL_NAME",
    "SEARCH_TOOL_PARAMETERS",
    "ExportedTools",
    "NameRule",
    "export_tools",
    "gemini_schema",
    "mcp_tool",
    "object_schema",
    "registered_tools",
    "tool_items",
]
_PROVIDERS = set(__all__) - {"FORMATS"}


def __getattr__(name: str) -> Any:
    if name not in _PROVIDERS:
        raise AttributeError(f"module 'toolcat.export' has no attribute {name!r}")
    value = getattr(importlib.import_module(".providers", __name__), name)
    globals()[name] = value
    return value
