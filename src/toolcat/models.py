"""The data toolcat deals in: tool and toolkit definitions, registered tools, pages and hits.

Every model sets ``defer_build``: pydantic then builds a model's validator on first use
instead of at import, which keeps ``import toolcat`` (and a cold ``toolcat list``) fast.

Definitions (``Tool``, ``Toolkit``) are what an admin writes in a manifest or derives from
code; they validate strictly (unknown fields are errors, so typos surface). What the catalog
hands back (``RegisteredTool``, ``ToolPage``, ``SearchResult``...) is built from rows the
catalog validated on the way in, so it is constructed without validating again.

No ``from __future__ import annotations`` here: pydantic would have to evaluate every field's
annotation from its string when the classes are created, which made importing this module
about 1.6 times slower (measured in-process, pydantic already imported: 14 ms against 9 ms
on a loaded machine). Annotations that name a class defined later are quoted.
"""

import hashlib
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_validator,
    model_validator,
)

from .definitions import walks
from .definitions.names import TOOL_NAME_RE, TOOLKIT_NAME_RE

# Every pattern is used with ``fullmatch``: ``$`` would also match before a final newline,
# letting ``files\n`` pass for ``files``.
IMPLEMENTATION_RE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
    r"|mcp\+(stdio|http):[^\n]+#[^#\n]+"  # a tool of an MCP server (see toolcat.remote.mcp)
    r"|openapi\+http:[^#\s]+#\{.*\}"  # a REST operation (see toolcat.remote.openapi)
)
MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_TAG_LENGTH = 64
# Bounds for every way in (manifests, Python code, MCP and OpenAPI imports): a manifest stops
# at 4 MiB, but an imported server or document had none (30-50 MB descriptions, 100,000
# tools were stored). The longest description among the shared benchmark and OpenAPI
# documents is a few KB; the largest toolkit some hundreds of tools.
MAX_DESCRIPTION_CHARS = 65_536
MAX_TOOLS_PER_TOOLKIT = 10_000


# One encoder for every canonical dump: ``json.dumps`` with options builds a new one a call
# (a tenth of a tool definition's dump).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal content gives equal text."""
    return _CANONICAL.encode(value)


# Tool definitions and toolkits' hashes are encoded from pydantic's JSON-mode dumps of
# validated models: new trees of plain values, which hold no cycle and run no code of
# anyone's. Those go through one C encoder made once, without the dict of containers being
# encoded that catches a cycle (``encode`` makes both a call): 10.95 -> 8.82 us a tool
# definition. Never other values: without that dict a cycle runs down to the recursion
# limit (a segfault in a thread with a small stack or under a raised limit: attack56).
def _tree_encoder() -> Callable[[Any, int], Any] | None:
    """The kept C encoder, where this Python has one and it gives ``_CANONICAL``'s text on
    a probe; else None."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    probe = {"b": [1, 2.5, None, True, "é\n"], "a": {}}
    try:
        encoder = make(
            None,
            _CANONICAL.default,
            json.encoder.encode_basestring,
            None,
            ":",
            ",",
            True,
            False,
            True,
        )
        same = "".join(encoder(probe, 0)) == _CANONICAL.encode(probe)
    except (TypeError, ValueError):
        return None
    return encoder if same else None


_TREE_ENCODER = _tree_encoder()


def canonical_tree_json(tree: dict[str, Any]) -> str:
    """``canonical_json`` of a dict made of plain JSON values that holds no cycle: pydantic's
    ``model_dump(mode="json")`` of a validated model, or a dict built from such dumps."""
    if _TREE_ENCODER is None:
        return _CANONICAL.encode(tree)
    return "".join(_TREE_ENCODER(tree, 0))


def canonical_members(tree: dict[str, Any]) -> dict[str, str]:
    """Each member's value of a dict ``canonical_tree_json`` may encode, as it encodes it:
    ``canonical_object`` of them is its text. Several texts that share members (a tool's
    definition and its part of the toolkit's hash) are put together without encoding a
    member twice."""
    encode_text = json.encoder.encode_basestring
    encoder = _TREE_ENCODER
    return {
        key: encode_text(value)
        if type(value) is str
        else "".join(encoder(value, 0))
        if encoder is not None
        else _CANONICAL.encode(value)
        for key, value in tree.items()
    }


def canonical_object(members: dict[str, str]) -> str:
    """The canonical JSON of a dict from its members' texts (``canonical_members``)."""
    encode_text = json.encoder.encode_basestring
    return "{" + ",".join(encode_text(key) + ":" + members[key] for key in sorted(members)) + "}"


def content_hash(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value``."""
    return text_hash(canonical_json(value))


def text_hash(canonical: str) -> str:
    """SHA-256 of canonical JSON text already made (``content_hash`` without the dump)."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _check_tags(tags: list[str]) -> list[str]:
    cleaned: list[str] = []
    for tag in tags:
        tag = tag.strip()
        if not tag or len(tag) > MAX_TAG_LENGTH:
            raise ValueError(f"tag {tag!r} must be 1-{MAX_TAG_LENGTH} characters")
        if tag not in cleaned:
            cleaned.append(tag)
    return cleaned


_meta_validator: Callable[[Any], Any] | None = None


Tags = Annotated[list[str], AfterValidator(_check_tags)]


def check_json_schema(schema: Any, what: str) -> None:
    """Raise ``ValueError`` unless ``schema`` is valid JSON Schema.

    Checked against the draft-07 meta-schema, compiled once by fastjsonschema (about 20 µs a
    schema; jsonschema's 2020-12 meta-validation costs 0.8 ms, too slow for bulk
    registration), unless ``plainly_valid`` already knows it passes (a schema of common
    keywords only, a few µs). Keywords draft-07 does not know, like ``$defs``, pass
    unchecked.
    """
    global _meta_validator
    from .definitions.schema_draft7_plain import plainly_valid

    if plainly_valid(schema):  # the common keywords alone, checked directly
        return
    import fastjsonschema  # registration only

    if _meta_validator is None:
        from .definitions.schema_draft7 import DRAFT7_META_SCHEMA

        # use_default=False: by default the compiled validator writes defaults into the data
        _meta_validator = fastjsonschema.compile(DRAFT7_META_SCHEMA, use_default=False)
    try:
        _meta_validator(schema)
    except fastjsonschema.JsonSchemaValueException as e:
        path = "/".join(str(p) for p in (e.path or [])[1:]) or "(root)"
        reason = (e.message or "invalid").removeprefix((e.name or "") + " ")
        raise ValueError(f"{what} is not valid JSON Schema at {path}: {reason}") from None


REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


def remote_references(schema: Any) -> list[str]:
    """References in ``schema`` that point outside it (anything but ``#...``).

    toolcat never fetches a schema: a remote ``$ref`` would make the host open any URL (or
    file) a manifest or an MCP server names, at call time. In C where it was built
    (definitions/walks.py).
    """
    native = walks.compiled()
    if native is not None:
        found: list[str] | None = native.remote_references(schema, REF_KEYWORDS)
        if found is not None:  # not declined
            return found
    found = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in REF_KEYWORDS and isinstance(value, str) and not value.startswith("#"):
                    found.append(value)
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def check_local_references(schema: Any, what: str) -> None:
    """Raise ``ValueError`` if ``schema`` has a reference that is not local (``#/...``)."""
    remote = remote_references(schema)
    if remote:
        raise ValueError(
            f"{what} has a non-local $ref {remote[0]!r}; only references inside the schema "
            "('#/$defs/...') are allowed: toolcat never fetches schemas"
        )


def check_object_schema(schema: dict[str, Any], what: str) -> dict[str, Any]:
    """Raise ``ValueError`` unless ``schema`` is a valid JSON Schema describing an object."""
    if schema.get("type") != "object":
        raise ValueError(f"{what} must be a JSON Schema with type 'object'")
    check_json_schema(schema, what)
    check_local_references(schema, what)
    return schema


class ToolAnnotations(BaseModel):
    """Behaviour hints, passed through to clients (MCP names them ``readOnlyHint`` etc.)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    title: str | None = None
    read_only: bool | None = None
    destructive: bool | None = None
    open_world: bool | None = None


def _bounded_description(value: str) -> str:
    if len(value) > MAX_DESCRIPTION_CHARS:
        raise ValueError(
            f"the description is {len(value):,} characters; at most {MAX_DESCRIPTION_CHARS:,}"
        )
    return value


class Tool(BaseModel):
    """A tool definition as an admin writes it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    output_schema: dict[str, Any] | None = None
    tags: Tags = Field(default_factory=list)
    defer_loading: bool | None = None
    idempotent: bool = False
    streaming: bool = False
    annotations: ToolAnnotations | None = None
    implementation: str | None = None
    examples: list[str] = Field(default_factory=list)
    search_hint: str | None = None
    timeout: float | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1)
    max_result_bytes: int | None = Field(default=None, ge=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TOOL_NAME_RE.fullmatch(value):
            raise ValueError("tool names are 1-64 characters of A-Z, a-z, 0-9, '_' and '-'")
        return value

    @field_validator("description")
    @classmethod
    def _description(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("a tool needs a description: it is what search finds it by")
        return _bounded_description(value)

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_object_schema(value, "parameters")

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_json_schema(value, "output_schema")
            check_local_references(value, "output_schema")
        return value

    @field_validator("implementation")
    @classmethod
    def _implementation(cls, value: str | None) -> str | None:
        if value is not None and not IMPLEMENTATION_RE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not of the form 'package.module:attribute' (or "
                "'mcp+stdio:CMD#TOOL', 'openapi+http:URL#{...}')"
            )
        return value


class ToolHead(NamedTuple):
    """A tool's name and implementation: what registration checks of it (trust roots,
    secret references) beside the rows made of it."""

    name: str
    implementation: str | None


class ToolkitHead(NamedTuple):
    """A validated ``Toolkit`` without its tools' definitions (``Toolkit.head``).

    Workers that read manifests send this instead of the toolkit: a pydantic toolkit cost
    the writer ~16 us a tool to unpickle, this 0.6 (registry/parallel.py checks its types
    and values, ``check_head``, before it is trusted: 0.7 us a tool)."""

    name: str
    version: str
    description: str
    tags: tuple[str, ...]
    defer_loading: bool
    module: str | None
    tools: tuple[ToolHead, ...]


class Toolkit(BaseModel):
    """A named, versioned group of tools: one manifest file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    name: str = Field(validation_alias=AliasChoices("toolkit", "name"))
    version: str
    description: str = ""
    tags: Tags = Field(default_factory=list)
    defer_loading: bool = False
    module: str | None = None
    tools: list[Tool]

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TOOLKIT_NAME_RE.fullmatch(value):
            raise ValueError("toolkit names are 1-64 characters of a-z, 0-9, '_' and '-'")
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> str:
        from packaging.version import InvalidVersion, Version

        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise ValueError("version must be a string such as '1.2.0'")
        if value != value.strip():
            raise ValueError(f"version {value!r} has spaces or newlines around it")
        try:
            return str(Version(value))
        except InvalidVersion:
            raise ValueError(f"{value!r} is not a PEP 440 version (for example 1.2.0)") from None

    @field_validator("module")
    @classmethod
    def _module(cls, value: str | None) -> str | None:
        if value is not None and not MODULE_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a dotted module path")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[Tool]) -> list[Tool]:
        if not value:
            raise ValueError("a toolkit needs at least one tool")
        if len(value) > MAX_TOOLS_PER_TOOLKIT:
            raise ValueError(
                f"{len(value):,} tools; a toolkit holds at most {MAX_TOOLS_PER_TOOLKIT:,}"
            )
        return value

    @field_validator("description")
    @classmethod
    def _description(cls, value: str) -> str:
        return _bounded_description(value)

    @model_validator(mode="after")
    def _consistent(self) -> "Toolkit":
        seen: set[str] = set()
        for tool in self.tools:
            if tool.name in seen:
                raise ToolFieldError(tool.name, "name", "duplicate tool name in this toolkit")
            seen.add(tool.name)
            impl = tool.implementation
            if _outside_module(impl, self.module):
                raise ToolFieldError(
                    tool.name,
                    "implementation",
                    f"{impl!r} lies outside the toolkit's module {self.module!r}",
                )
        return self

    def content_hash(self) -> str:
        """Identifies this definition: equal hashes mean nothing changed."""
        return content_hash(self.model_dump(mode="json", by_alias=False))

    def head(self) -> ToolkitHead:
        """What registering this version writes of it beside its tools' rows, and what the
        checks before it read (``store/writer.py``)."""
        return ToolkitHead(
            self.name,
            self.version,
            self.description,
            tuple(self.tags),
            self.defer_loading,
            self.module,
            tuple(ToolHead(tool.name, tool.implementation) for tool in self.tools),
        )


def _outside_module(implementation: str | None, module: str | None) -> bool:
    """Whether a tool's implementation lies outside its toolkit's ``module``."""
    if not implementation or not module:
        return False
    named = implementation.split(":", 1)[0]
    return named != module and not named.startswith(module + ".")


def check_head(head: Any) -> str | None:
    """What is wrong with ``head`` made elsewhere (``None``: nothing): the types of a
    ``ToolkitHead``, every text a ``str``, and every value one a validated ``Toolkit``
    holds (names, version, description, tags, module, each tool's name and
    implementation), so that a head no manifest could give is never written."""
    problem = _head_types(head)
    if problem is not None:
        return problem
    from packaging.version import InvalidVersion, Version

    try:
        if str(Version(head.version)) != head.version:
            return "the version is not in its normal form"
        _bounded_description(head.description)
        if list(head.tags) != _check_tags(list(head.tags)):
            return "the tags are not as a toolkit holds them"
    except (InvalidVersion, ValueError) as e:
        return str(e)
    if not TOOLKIT_NAME_RE.fullmatch(head.name):
        return "the toolkit's name is not one a toolkit may have"
    if head.module is not None and not MODULE_RE.fullmatch(head.module):
        return "the module is not a dotted module path"
    if len(head.tools) > MAX_TOOLS_PER_TOOLKIT:
        return "more tools than a toolkit holds"
    names = set()
    for tool in head.tools:
        if not TOOL_NAME_RE.fullmatch(tool.name) or tool.name in names:
            return "a tool's name is not one a tool may have, or is there twice"
        names.add(tool.name)
        impl = tool.implementation
        if impl is not None and not IMPLEMENTATION_RE.fullmatch(impl):
            return f"tool {tool.name!r}: the implementation is not one a tool may have"
        if _outside_module(impl, head.module):
            return f"tool {tool.name!r}: the implementation lies outside the module"
    return None


def _head_types(head: Any) -> str | None:
    if type(head) is not ToolkitHead:
        return f"not a toolkit's head but {type(head).__name__}"
    if not all(type(v) is str for v in (head.name, head.version, head.description)):
        return "a text field is not text"
    if type(head.defer_loading) is not bool:
        return "defer_loading is not a boolean"
    if not (head.module is None or type(head.module) is str):
        return "the module is not text"
    if type(head.tags) is not tuple or not all(type(tag) is str for tag in head.tags):
        return "the tags are not text"
    if type(head.tools) is not tuple or not head.tools:
        return "no tools"
    for tool in head.tools:
        if type(tool) is not ToolHead or type(tool.name) is not str:
            return "a tool is not named"
        if not (tool.implementation is None or type(tool.implementation) is str):
            return f"tool {tool.name!r}: the implementation is not text"
    return None


class ToolFieldError(ValueError):
    """Raised by ``Toolkit`` validation to point at one tool's field."""

    def __init__(self, tool: str, field: str, reason: str) -> None:
        self.tool = tool
        self.field = field
        self.reason = reason
        super().__init__(reason)


class RegisteredTool(BaseModel):
    """A tool as the catalog holds it: its definition plus where it lives.

    ``tags`` are the tool's own tags and its toolkit's; ``defer_loading`` is resolved
    against the toolkit's default.
    """

    model_config = ConfigDict(defer_build=True)

    id: str
    name: str
    toolkit: str
    version: str
    description: str
    parameters: dict[str, Any]
    tags: list[str]
    defer_loading: bool
    output_schema: dict[str, Any] | None = None
    idempotent: bool = False
    streaming: bool = False
    annotations: ToolAnnotations | None = None
    implementation: str | None = None
    examples: list[str] = Field(default_factory=list)
    search_hint: str | None = None
    timeout: float | None = None
    max_concurrency: int | None = None
    max_result_bytes: int | None = None
    deprecated: bool = False
    # The toolkit's import root, checked again at call time (see toolcat.policy.trust); internal.
    module: str | None = Field(default=None, exclude=True, repr=False)
    # How its toolkit was registered (``manifest``, ``python``, ``mcp``, ``openapi``), written
    # by the registration path, never read from content: only imports may resolve ``${NAME}``
    # (see toolcat.remote.secrets); internal.
    kind: str | None = Field(default=None, exclude=True, repr=False)

    def summary(self) -> dict[str, Any]:
        """The compact shape used by ``list`` and ``search`` output."""
        return {
            "id": self.id,
            "name": self.name,
            "toolkit": self.toolkit,
            "version": self.version,
            "description": self.description,
            "parameters": self.parameters,
            "tags": self.tags,
            "defer_loading": self.defer_loading,
        }


class ToolPage(BaseModel):
    """One page of list mode. Pass ``next_cursor`` back to get the next page."""

    model_config = ConfigDict(defer_build=True)

    revision: int
    tools: list[RegisteredTool]
    next_cursor: str | None = None


class SearchHit(BaseModel):
    """One ranked search result; higher scores are better.

    ``match`` says how well the tool fits the request, calibrated on benchmark queries
    (README, "Nothing fits"): ``strong`` (likely what was asked for), ``weak`` (related,
    worth a look), ``none`` (ranked only because something had to be).
    """

    model_config = ConfigDict(defer_build=True)

    rank: int
    score: float
    tool: RegisteredTool
    match: Literal["strong", "weak", "none"] = "weak"


class SearchResult(BaseModel):
    """The answer to a search: ranked hits and the catalog revision they came from.

    ``warnings`` says when the answer is partial (tools without vectors, for example).
    """

    model_config = ConfigDict(defer_build=True)

    revision: int
    query: str
    mode: str
    hits: list[SearchHit]
    warnings: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def no_match(self) -> bool:
        """True when no tool fits the request (no hit, or every hit's match is ``none``): the
        agent should ask or stop searching rather than call one of these."""
        return all(h.match == "none" for h in self.hits)


class ReindexReport(BaseModel):
    """What a reindex did."""

    model_config = ConfigDict(defer_build=True)

    model: str
    dimension: int | None
    embedded: int
    skipped: int
    removed: int
    fts_rebuilt: int
    seconds: float
    tools_per_second: float
    export_seconds: float = 0.0
    """Time spent exporting or optimising the model's ONNX graph (not in
    ``tools_per_second``)."""
    device: str = ""
    """What encoded the documents, e.g. ``cpu (onnxruntime)`` or ``cuda (torch float16,
    NVIDIA H100 80GB HBM3)``; empty when nothing was embedded."""
    shortlist_seconds: float = 0.0
    """Time spent saving the large catalog's shortlist index beside it (search/ann.py; not
    in ``tools_per_second``)."""


class ToolkitVersion(BaseModel):
    """One registered version of a toolkit."""

    model_config = ConfigDict(defer_build=True)

    toolkit: str
    version: str
    description: str
    tags: list[str]
    tools: int
    active: bool
    deprecated: bool
    registered_at: str
    source: str | None = None


class RegistrationResult(BaseModel):
    """What registering one toolkit did."""

    model_config = ConfigDict(defer_build=True)

    toolkit: str
    version: str
    status: Literal["added", "unchanged", "replaced"]
    tools: int
    revision: int
    changes: dict[str, list[str]] | None = None  # "added"/"changed"/"removed" tool names


ErrorCode = Literal[
    "UNKNOWN_TOOL", "INVALID_ARGUMENTS", "TOOL_DENIED", "IMPORT_FAILED", "TOOL_ERROR", "TIMEOUT"
]


class ToolEvent(BaseModel):
    """Something a tool reported while it ran (A2E's four kinds).

    - ``progress`` (``toolcat.report_progress``): ``progress`` done so far and, when known,
      ``total``; maybe a ``message``.
    - ``status`` (``report_status``): ``state`` ("waiting for the API") and maybe a ``message``.
    - ``artifact`` (``report_artifact``): ``name``, ``mime_type``, ``size`` in bytes, a
      ``message`` describing it, and its content: ``text`` or base64 ``blob`` when small,
      else ``uri``, the ``file://`` URI of the copy in the call's artifact folder
      (runtime/artifacts.py: kept 24 hours). ``content()`` reads it either way.
    - ``log`` (``report_log``): ``message`` and ``level``.

    ``elapsed_ms`` counts from the start of the call.
    """

    model_config = ConfigDict(defer_build=True)

    kind: Literal["progress", "status", "artifact", "log"]
    progress: float | None = None
    total: float | None = None
    message: str | None = None
    level: str | None = None
    state: str | None = None
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    text: str | None = None
    blob: str | None = None
    uri: str | None = None
    elapsed_ms: float = 0.0

    def content(self) -> bytes:
        """An artifact's bytes, from the event or from its file.

        Raises:
            ValueError: Not an artifact, or its file is gone (past its time in the folder).
        """
        if self.kind != "artifact":
            raise ValueError(f"a {self.kind} event has no content")
        if self.text is not None:
            return self.text.encode("utf-8")
        if self.blob is not None:
            import base64

            return base64.b64decode(self.blob)
        from urllib.parse import unquote, urlparse

        path = unquote(urlparse(self.uri or "").path)
        try:
            with open(path, "rb") as file:
                return file.read()
        except OSError as e:
            raise ValueError(f"artifact {self.name!r}: {self.uri} is gone ({e.strerror})") from e


class ToolResult(BaseModel):
    """The outcome of calling a tool. A failure is a result, never an exception.

    ``events`` holds what the tool reported while it ran (the last ``MAX_EVENTS``, and
    every artifact); ``artifacts`` lists the artifact events alone.
    """

    model_config = ConfigDict(defer_build=True)

    success: bool
    data: Any = None
    error: str | None = None
    error_code: ErrorCode | None = None
    duration_ms: float = 0.0
    truncated: bool = False
    events: list[ToolEvent] = Field(default_factory=list)

    @property
    def artifacts(self) -> list[ToolEvent]:
        """The artifacts the tool handed back, in the order it reported them."""
        return [event for event in self.events if event.kind == "artifact"]


# A saved eval (``toolcat eval --save``) is one meta value: every run's rows, bounded so the
# quality page reads and draws it in a few milliseconds, and so a value written into the file
# by someone else cannot make it read or draw without end.
MAX_EVAL_ROWS = 1000
MAX_EVAL_BYTES = 512 * 1024
EvalScore = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class EvalRow(BaseModel):
    """One source and search mode of a saved ``toolcat eval``: its strict scores, averaged
    over its queries. ``baseline`` marks the plain baseline's rows (``--baseline``);
    ``learned_from`` the uses recorded before scoring (``--learn-split``)."""

    model_config = ConfigDict(
        extra="forbid", strict=True, populate_by_name=True, frozen=True, defer_build=True
    )

    source: str = Field(min_length=1, max_length=255)  # a bench folder's name
    mode: str = Field(min_length=1, max_length=64)
    baseline: bool = False
    queries: int = Field(ge=0, le=10**9)
    learned_from: int = Field(default=0, ge=0, le=10**12)
    r1: EvalScore = Field(alias="R@1")
    r5: EvalScore = Field(alias="R@5")
    r10: EvalScore = Field(alias="R@10")
    ndcg10: EvalScore = Field(alias="nDCG@10")
    mrr10: EvalScore = Field(alias="MRR@10")


class EvalResult(BaseModel):
    """The last ``toolcat eval --save``: what the web console's quality page shows.

    ``revision`` is the catalog's when the result was saved, ``model`` the embedding model
    the evaluation searched with (the catalog's), ``pooled`` whether every source's queries
    were searched among all sources' tools (else each source in a catalog of its own).
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)

    saved_at: str = Field(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
    revision: int = Field(ge=0)
    model: str = Field(max_length=200)
    pooled: bool
    rows: list[EvalRow] = Field(min_length=1, max_length=MAX_EVAL_ROWS)
