"""toolcat: a searchable catalog of LLM tool definitions with deferred loading.

The public names are imported on first use (PEP 562), so ``import toolcat`` costs almost
nothing and each command loads only the modules it uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .catalog import Catalog
    from .errors import (
        AmbiguousNameError,
        CatalogDamagedError,
        CatalogError,
        DefinitionChangedError,
        ImportFailedError,
        InvalidArgumentsError,
        InvalidQueryError,
        ManifestError,
        NotFoundError,
        PolicyError,
        ReadOnlyReplicaError,
        ToolcatError,
        ToolDeniedError,
        ToolFailedError,
        ToolTimeoutError,
        UnknownToolError,
        UnknownToolkitError,
        VersionConflictError,
    )
    from .models import (
        RegisteredTool,
        RegistrationResult,
        SearchHit,
        SearchResult,
        Tool,
        ToolAnnotations,
        ToolEvent,
        Toolkit,
        ToolkitVersion,
        ToolPage,
        ToolResult,
    )
    from .policy.rules import Policy
    from .policy.tags import TagFilter
    from .registry.python import tool
    from .runtime.events import report_artifact, report_log, report_progress, report_status

from .definitions.version import __version__ as __version__

# Where each public name lives.
_MODULES = {
    "Catalog": ".catalog",
    "Policy": ".policy.rules",
    "TagFilter": ".policy.tags",
    "tool": ".registry.python",
    "report_artifact": ".runtime.events",
    "report_log": ".runtime.events",
    "report_progress": ".runtime.events",
    "report_status": ".runtime.events",
    **dict.fromkeys(
        [
            "AmbiguousNameError",
            "CatalogDamagedError",
            "CatalogError",
            "DefinitionChangedError",
            "ImportFailedError",
            "InvalidArgumentsError",
            "InvalidQueryError",
            "ManifestError",
            "NotFoundError",
            "PolicyError",
            "ReadOnlyReplicaError",
            "ToolcatError",
            "ToolDeniedError",
            "ToolFailedError",
            "ToolTimeoutError",
            "UnknownToolError",
            "UnknownToolkitError",
            "VersionConflictError",
        ],
        ".errors",
    ),
    **dict.fromkeys(
        [
            "RegisteredTool",
            "RegistrationResult",
            "SearchHit",
            "SearchResult",
            "Tool",
            "ToolAnnotations",
            "ToolEvent",
            "Toolkit",
            "ToolkitVersion",
            "ToolPage",
            "ToolResult",
        ],
        ".models",
    ),
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'toolcat' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULES])


__all__ = [
    "AmbiguousNameError",
    "Catalog",
    "CatalogDamagedError",
    "CatalogError",
    "DefinitionChangedError",
    "ImportFailedError",
    "InvalidArgumentsError",
    "InvalidQueryError",
    "ManifestError",
    "NotFoundError",
    "Policy",
    "PolicyError",
    "ReadOnlyReplicaError",
    "RegisteredTool",
    "RegistrationResult",
    "SearchHit",
    "SearchResult",
    "TagFilter",
    "Tool",
    "ToolAnnotations",
    "ToolDeniedError",
    "ToolEvent",
    "ToolFailedError",
    "ToolPage",
    "ToolResult",
    "ToolTimeoutError",
    "ToolcatError",
    "Toolkit",
    "ToolkitVersion",
    "UnknownToolError",
    "UnknownToolkitError",
    "VersionConflictError",
    "__version__",
    "report_artifact",
    "report_log",
    "report_progress",
    "report_status",
    "tool",
]
