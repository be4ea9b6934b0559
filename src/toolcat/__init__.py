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
    Toolkit,
    ToolkitVersion,
    ToolPage,
    ToolResult,
)
from .policy import Policy
from .registry.python import tool

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
    "RegisteredTool",
    "RegistrationResult",
    "SearchHit",
    "SearchResult",
    "Tool",
    "ToolAnnotations",
    "ToolDeniedError",
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
    "tool",
]
