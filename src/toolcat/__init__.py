"""toolcat: a searchable catalog of LLM tool definitions with deferred loading."""

from .catalog import Catalog
from .errors import (
    AmbiguousNameError,
    CatalogError,
    InvalidQueryError,
    ManifestError,
    NotFoundError,
    ToolcatError,
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

__version__ = "0.1.0"

__all__ = [
    "AmbiguousNameError",
    "Catalog",
    "CatalogError",
    "InvalidQueryError",
    "ManifestError",
    "NotFoundError",
    "RegisteredTool",
    "RegistrationResult",
    "SearchHit",
    "SearchResult",
    "Tool",
    "ToolAnnotations",
    "ToolPage",
    "ToolResult",
    "ToolcatError",
    "Toolkit",
    "ToolkitVersion",
    "UnknownToolError",
    "UnknownToolkitError",
    "VersionConflictError",
    "__version__",
]
