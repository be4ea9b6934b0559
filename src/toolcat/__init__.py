"""toolcat: a searchable catalog of LLM tool definitions with deferred loading."""

from .catalog import Catalog
from .errors import (
    AmbiguousNameError,
    CatalogError,
    DefinitionChangedError,
    ImportFailedError,
    InvalidArgumentsError,
    InvalidQueryError,
    ManifestError,
    NotFoundError,
    PolicyError,
    ToolcatError,
    ToolDeniedError,
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
from .policy import Policy
from .registry.python import tool
from .runtime.events import report_log, report_progress

__version__ = "0.1.0"

__all__ = [
    "AmbiguousNameError",
    "Catalog",
    "CatalogError",
    "DefinitionChangedError",
    "ImportFailedError",
    "InvalidArgumentsError",
    "InvalidQueryError",
    "ManifestError",
    "NotFoundError",
    "Policy",
    "PolicyError",
    "RegisteredTool",
    "RegistrationResult",
    "SearchHit",
    "SearchResult",
    "Tool",
    "ToolAnnotations",
    "ToolDeniedError",
    "ToolEvent",
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
    "report_log",
    "report_progress",
    "tool",
]
