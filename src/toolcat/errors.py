"""One error hierarchy for the whole library.

Every error carries a machine-readable ``code`` and a CLI ``exit_code``. Faces (the CLI, the
MCP server, ``ToolResult``) translate these once; nothing else inspects exception types.
"""

from __future__ import annotations


class ToolcatError(Exception):
    """Base class of every error toolcat raises on purpose."""

    code = "TOOLCAT_ERROR"
    exit_code = 1


MAX_PROBLEMS = 20  # problems reported per registration; the count of the rest is given


class ManifestError(ToolcatError):
    """A toolkit definition is malformed. Says which file, toolkit, tool and field.

    One error may carry several problems (``problems``, each a ``ManifestError`` of its own,
    at most ``MAX_PROBLEMS`` of them; ``total`` counts all). Its message is the first
    problem's, with the count of the others; ``lines()`` gives one line per problem.
    """

    code = "INVALID_MANIFEST"
    exit_code = 3

    def __init__(
        self,
        reason: str,
        *,
        file: str | None = None,
        toolkit: str | None = None,
        tool: str | None = None,
        field: str | None = None,
    ) -> None:
        self.reason = reason
        self.file = file
        self.toolkit = toolkit
        self.tool = tool
        self.field = field
        self.problems: list[ManifestError] = [self]
        self.total = 1
        super().__init__(self._render())

    @classmethod
    def of(cls, problems: list[ManifestError]) -> ManifestError:
        """One error for several problems (each possibly carrying several itself)."""
        flat = [p for error in problems for p in error.problems]
        total = sum(error.total for error in problems)
        if len(flat) == 1 and total == 1:
            return flat[0]
        first = flat[0]
        error = cls(
            first.reason, file=first.file, toolkit=first.toolkit, tool=first.tool, field=first.field
        )
        error.problems = flat[:MAX_PROBLEMS]
        error.total = total
        error.args = (error._render(),)
        return error

    def _location(self) -> str:
        where = []
        if self.toolkit is not None:
            where.append(f"toolkit {self.toolkit!r}")
        if self.tool is not None:
            where.append(f"tool {self.tool!r}")
        if self.field is not None:
            where.append(f"field {self.field!r}")
        prefix = f"{self.file}: " if self.file else ""
        location = ", ".join(where)
        reason = " ".join(self.reason.split())  # one line, whatever the reason held
        return f"{prefix}{location}: {reason}" if location else f"{prefix}{reason}"

    def _render(self) -> str:
        text = self._location()
        more = self.total - 1
        if more > 0:
            text += f" (and {more} more problem{'s' if more > 1 else ''})"
        return text

    def lines(self) -> list[str]:
        """One line per problem; a last line counts those past ``MAX_PROBLEMS``."""
        lines = [p._location() for p in self.problems]
        if self.total > len(self.problems):
            lines.append(f"... and {self.total - len(self.problems)} more problems")
        return lines

    def to_dict(self) -> list[dict[str, str | None]]:
        """The problems as ``{"file", "toolkit", "tool", "field", "reason"}`` objects."""
        return [
            {
                "file": p.file,
                "toolkit": p.toolkit,
                "tool": p.tool,
                "field": p.field,
                "reason": p.reason,
            }
            for p in self.problems
        ]

    def in_file(self, file: str) -> ManifestError:
        """The same error (every problem of it), located in ``file``."""
        located = [
            ManifestError(
                p.reason, file=p.file or file, toolkit=p.toolkit, tool=p.tool, field=p.field
            )
            for p in self.problems
        ]
        error = ManifestError.of(located)
        error.total = max(self.total, len(located))
        error.args = (error._render(),)
        return error


class NotFoundError(ToolcatError):
    """Something named does not exist in the catalog."""

    code = "NOT_FOUND"
    exit_code = 4


class UnknownToolError(NotFoundError):
    """No tool answers to this name. ``suggestions`` lists close matches."""

    code = "UNKNOWN_TOOL"

    def __init__(self, name: str, suggestions: list[str] | None = None) -> None:
        self.name = name
        self.suggestions = suggestions or []
        hint = f" Did you mean: {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown tool {name!r}.{hint}")


class DeprecatedToolError(UnknownToolError):
    """The tool exists only in deprecated (or otherwise inactive) toolkit versions."""

    def __init__(self, name: str, pinned: list[str]) -> None:
        self.name = name
        self.suggestions = pinned
        NotFoundError.__init__(
            self,
            f"tool {name!r} is only in deprecated toolkit versions; pin one to use it: "
            + ", ".join(pinned),
        )


class UnknownToolkitError(NotFoundError):
    """No toolkit (or toolkit version) answers to this name."""

    code = "UNKNOWN_TOOLKIT"


class DeprecatedToolkitError(UnknownToolkitError):
    """A toolkit named without a version has every version deprecated (the message names
    those versions, to pin one)."""


class AmbiguousNameError(ToolcatError):
    """A bare tool name matches tools in several toolkits."""

    code = "AMBIGUOUS_NAME"
    exit_code = 5

    def __init__(self, name: str, candidates: list[str]) -> None:
        self.name = name
        self.candidates = candidates
        super().__init__(f"tool name {name!r} is ambiguous; use one of: {', '.join(candidates)}")


class VersionConflictError(ToolcatError):
    """A toolkit version is already registered with different content."""

    code = "VERSION_CONFLICT"
    exit_code = 6


class SourceKindError(VersionConflictError):
    """A registration would silently change where a toolkit comes from (a manifest, Python
    code, an MCP server, an OpenAPI document); ``replace`` allows it."""


class InvalidQueryError(ToolcatError):
    """A search or list request cannot be answered as asked (bad mode, cursor, pattern...)."""

    code = "INVALID_QUERY"
    exit_code = 7


class CatalogError(ToolcatError):
    """The catalog file cannot be used (newer schema, not a catalog, locked too long)."""

    code = "CATALOG_ERROR"
    exit_code = 8


class CatalogDamagedError(CatalogError):
    """Something stored in the catalog cannot be read: a damaged page, or a table, a meta
    value or a row edited by hand. ``path`` names the file once it is known."""

    def __init__(self, reason: str, path: str | None = None, *, replica: bool = False) -> None:
        self.reason = " ".join(reason.split())
        self.path = path
        self.replica = replica
        where = f"catalog {path!r}" if path else "the catalog"
        advice = (
            "it is a replica's copy: `toolcat serve --replica-of` restores it again by itself "
            "(or delete the file and start the replica again)"
            if replica
            else "restore a backup, or register the toolkits again into a new file"
        )
        super().__init__(f"{where} is damaged ({self.reason}); {advice}")

    def at(self, path: str) -> CatalogDamagedError:
        """The same error, naming the catalog file (unchanged when it already names one)."""
        return self if self.path else CatalogDamagedError(self.reason, path, replica=self.replica)

    def of_replica(self) -> CatalogDamagedError:
        """The same error, with the advice for a replica's copy."""
        return self if self.replica else CatalogDamagedError(self.reason, self.path, replica=True)


class ImportFailedError(ToolcatError):
    """A tool's implementation cannot be imported or is not callable."""

    code = "IMPORT_FAILED"
    exit_code = 9


class DefinitionChangedError(ImportFailedError):
    """An imported MCP server now defines a tool differently from what was registered (a
    "rug pull"): the call is refused rather than sent to a tool whose meaning moved."""

    def __init__(self, message: str, *, tool: str, changed: list[str]) -> None:
        super().__init__(message)
        self.tool = tool
        self.changed = changed


class InvalidArgumentsError(ToolcatError):
    """A call's arguments do not fit the tool's parameters schema."""

    code = "INVALID_ARGUMENTS"
    exit_code = 10


class ToolTimeoutError(ToolcatError):
    """A tool did not finish (or find a free concurrency slot) within its timeout."""

    code = "TIMEOUT"
    exit_code = 11


class ToolFailedError(ToolcatError):
    """A tool ran and failed (raised, returned what JSON cannot carry, or its worker died).

    ``call`` never raises it: it is the ``TOOL_ERROR`` of a ``ToolResult``; its exit code is
    what ``toolcat call`` exits with then."""

    code = "TOOL_ERROR"
    exit_code = 16


class ToolDeniedError(ToolcatError):
    """Policy (a rule or a guard) refuses the call."""

    code = "TOOL_DENIED"
    exit_code = 12


class PolicyError(ToolcatError):
    """A policy rule that cannot be read (empty, an unclosed ``[``, an unknown prefix)."""

    code = "INVALID_POLICY"
    exit_code = 2


class EmbeddingError(ToolcatError):
    """Embeddings cannot be computed or used as asked (missing extra, model or vectors)."""

    code = "EMBEDDING_ERROR"
    exit_code = 13


class ServeError(ToolcatError):
    """``toolcat serve --http`` cannot listen where it was told (the port is taken, the
    address is not this host's, a privileged port)."""

    code = "SERVE_FAILED"
    exit_code = 15


class ReadOnlyReplicaError(ToolcatError):
    """A write (register, remove, reindex, ...) sent to a read-only replica: admins write on
    the primary, which the message names; the replica follows it."""

    code = "READ_ONLY_REPLICA"
    exit_code = 14
