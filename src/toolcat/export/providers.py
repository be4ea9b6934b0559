"""Tool definitions in the shapes LLM APIs take: OpenAI (Chat Completions and Responses),
Anthropic, Gemini and MCP.

Each format has its own rules for tool names and for the JSON Schema it accepts. Names are
fitted to the rule with a reversible mapping (``ExportedTools.address``); schema features a
provider rejects are rewritten, or dropped with their meaning moved into the description so the
model still sees it. The rules, from each provider's documentation:

- OpenAI (Chat Completions ``tools[].function``, Responses ``tools[]``): name
  ``^[a-zA-Z0-9_-]{1,64}$``; ``parameters`` is a JSON Schema object with ``type: object`` at the
  top and no ``anyOf``/``oneOf``/``allOf``/``enum``/``not`` there. For Responses, deferred tools
  are grouped by toolkit into ``{"type": "namespace", "name", "description", "tools"}`` entries
  whose functions carry ``defer_loading: true`` (found by the ``tool_search`` tool); a call of
  one comes back with its ``namespace``.
- Anthropic (Messages ``tools[]``): name ``^[a-zA-Z0-9_-]{1,64}$``; ``input_schema`` has
  ``type: object`` and no ``oneOf``/``allOf``/``anyOf`` at the top level; deferred tools carry
  ``defer_loading: true`` for the tool search tool. Anthropic's own search tools
  (``tool_search_tool_bm25``/``_regex``) take at most 10,000 tools, and Claude's regex patterns
  at most 200 characters.
- Gemini (``tools[].functionDeclarations[]``): name starts with a letter or ``_``, then letters,
  digits, ``_ . : -``, at most 64; ``parameters`` is the OpenAPI 3.0 subset Gemini documents
  (type names upper-case, ``nullable`` instead of type lists, no ``$ref``, ``additionalProperties``,
  ``const``, ``oneOf``/``allOf``; ``enum`` for strings only; a few ``format`` values).
- MCP (``tools/list`` entries): name ``^[A-Za-z0-9_.-]{1,128}$``; ``inputSchema`` has
  ``type: object``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..definitions.names import fitted_name
from ..errors import InvalidQueryError, UnknownToolError
from .formats import FORMATS as FORMATS  # toolcat.export.FORMATS, as before

if TYPE_CHECKING:  # the CLI reads FORMATS for its options: no pydantic for that
    from ..models import RegisteredTool

ANTHROPIC_SEARCH_TOOLS = {
    "bm25": {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"},
    "regex": {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
}
ANTHROPIC_MAX_SEARCHABLE = 10_000  # tools Anthropic's tool search tool accepts
ANTHROPIC_MAX_PATTERN = 200  # characters of a regex pattern Claude may send to it
SEARCH_TOOL_NAME = "tool_search"
SEARCH_TOOL_DESCRIPTION = (
    "Search the tool catalog for tools that can do what you need. Describe the task in your "
    "own words; the best matching tools become available to call."
)
SEARCH_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What you want a tool to do."},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 20,
            "description": "How many tools to load (default 5).",
        },
    },
    "required": ["query"],
}


@dataclass(frozen=True)
class NameRule:
    """A provider's rule for tool names."""

    pattern: str  # the whole-name regex, for checks and tests
    invalid: str  # characters to replace
    max_length: int
    must_start: str = ""


OPENAI_NAMES = NameRule(r"^[a-zA-Z0-9_-]{1,64}$", r"[^A-Za-z0-9_-]+", 64)
NAME_RULES = {
    "openai-chat": OPENAI_NAMES,
    "openai-responses": OPENAI_NAMES,
    "anthropic": OPENAI_NAMES,
    "gemini": NameRule(
        r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$", r"[^A-Za-z0-9_.:-]+", 64, must_start="[A-Za-z_]"
    ),
    "mcp": NameRule(r"^[A-Za-z0-9_.-]{1,128}$", r"[^A-Za-z0-9_.-]+", 128),
}
TOP_LEVEL_FORBIDDEN = ("anyOf", "oneOf", "allOf", "enum", "not")

# Gemini's Schema object: https://ai.google.dev/api/caching#Schema
GEMINI_KEYS = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
}
GEMINI_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
GEMINI_FORMATS = {
    "string": {"enum", "date-time"},
    "number": {"float", "double"},
    "integer": {"int32", "int64"},
}
MAX_REF_DEPTH = 8
# The JSON Gemini's rewrite may copy in from ``$ref`` targets, per tool (each target counted
# at its size each time it is inlined): a schema whose definition refers to itself several
# times fans out exponentially (a 259-byte one made 35 MB at depth 8; a 20 KB one with a long
# description 17 MB). Past it, a reference is left as JSON text (decoded on return).
MAX_INLINED_BYTES = 512 * 1024


@dataclass
class ExportedTools:
    """Tools in one provider's format, with the way back from exported names to tools.

    Attributes:
        format: One of ``FORMATS``.
        tools: What to pass as the API's ``tools`` parameter.
        names: Exported name → catalog address (``toolkit.name@version``).
    """

    format: str
    tools: list[dict[str, Any]]
    names: dict[str, str] = field(default_factory=dict)
    json_arguments: dict[str, list[str]] = field(default_factory=dict)
    _exported: dict[str, str] = field(default_factory=dict, repr=False)  # tool id → name
    _namespaces: dict[str, str] = field(default_factory=dict, repr=False)  # toolkit → namespace
    _toolkit_descriptions: dict[str, str] = field(default_factory=dict, repr=False)
    _short_names: dict[str, str] = field(default_factory=dict, repr=False)
    _taken: set[str] = field(default_factory=set, repr=False)  # top-level names, namespaces
    _inside: dict[str, set[str]] = field(default_factory=dict, repr=False)  # namespace → names

    def address(self, exported_name: str, namespace: str | None = None) -> str:
        """The catalog address of a tool the model called by its exported name (and, for an
        OpenAI Responses call of a deferred tool, its ``namespace``); pass it to
        ``Catalog.call``.

        Raises:
            UnknownToolError: The name is not one of this export's.
        """
        key = f"{namespace}.{exported_name}" if namespace else exported_name
        try:
            return self.names[key]
        except KeyError:
            raise UnknownToolError(key, sorted(self.names)[:5]) from None

    def search_tool(self, kind: str | None = None) -> dict[str, Any]:
        """The tool-search entry to send beside ``tools``.

        - ``openai-responses``: a client-executed ``tool_search`` tool (answer its calls with
          ``tool_search_output``).
        - ``anthropic``: without ``kind``, a custom ``tool_search`` tool (answer it with a
          ``tool_result`` of ``tool_references``); with ``kind`` ``"bm25"`` or ``"regex"``,
          Anthropic's own search tool over the deferred tools of this export (at most 10,000;
          Claude's regex patterns are at most 200 characters).

        Raises:
            InvalidQueryError: Another format, an unknown ``kind``, or more deferred tools than
                Anthropic's search tool takes.
        """
        if self.format == "openai-responses" and kind is None:
            return {
                "type": "tool_search",
                "execution": "client",
                "description": SEARCH_TOOL_DESCRIPTION,
                "parameters": copy.deepcopy(SEARCH_TOOL_PARAMETERS),
            }
        if self.format == "anthropic" and kind is None:
            return {
                "name": SEARCH_TOOL_NAME,
                "description": SEARCH_TOOL_DESCRIPTION,
                "input_schema": copy.deepcopy(SEARCH_TOOL_PARAMETERS),
            }
        if self.format == "anthropic" and kind in ANTHROPIC_SEARCH_TOOLS:
            deferred = sum(1 for t in self.tools if t.get("defer_loading"))
            if deferred > ANTHROPIC_MAX_SEARCHABLE:
                raise InvalidQueryError(
                    f"Anthropic's tool search tool takes at most {ANTHROPIC_MAX_SEARCHABLE:,} "
                    f"tools and this export defers {deferred:,}: export fewer (by toolkit or "
                    "tag), or use search_tool() and answer the searches from toolcat"
                )
            return dict(ANTHROPIC_SEARCH_TOOLS[kind])
        kinds = "bm25, regex" if self.format == "anthropic" else "none"
        raise InvalidQueryError(
            f"no search tool {kind!r} for format {self.format!r} (kinds: {kinds}); search tools "
            "exist for openai-responses and anthropic"
        )

    def tool_search_output(self, hits: Iterable[Any], call_id: str | None) -> dict[str, Any]:
        """The ``tool_search_output`` input item answering a client-executed ``tool_search``
        call (OpenAI Responses) with these search hits (or tools): their definitions, deferred
        ones grouped by toolkit into namespaces as in the export. Tools not in the export yet
        are added to it, so ``address`` resolves their calls.

        Raises:
            InvalidQueryError: The export is not ``openai-responses``.
        """
        if self.format != "openai-responses":
            raise InvalidQueryError("tool_search_output is for the openai-responses format")
        groups: dict[str, dict[str, Any]] = {}
        loaded: list[dict[str, Any]] = []
        for tool in registered_tools(hits):
            if tool.id not in self._exported:
                self._add(tool)
            if not tool.defer_loading:
                continue  # always loaded: already in the tools sent with the request
            namespace = self._namespaces[tool.toolkit]
            declaration = _declaration(tool, self._exported[tool.id], self.format, self)
            declaration["defer_loading"] = True
            group = groups.get(namespace)
            if group is None:
                group = groups[namespace] = self._namespace_entry(tool.toolkit, [])
                loaded.append(group)
            group["tools"].append(declaration)
        return {
            "type": "tool_search_output",
            "call_id": call_id,
            "execution": "client",
            "status": "completed",
            "tools": loaded,
        }

    def _namespace_entry(self, toolkit: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
        description = self._toolkit_descriptions.get(toolkit) or f"Tools of {toolkit}"
        return {
            "type": "namespace",
            "name": self._namespaces[toolkit],
            "description": description,
            "tools": tools,
        }

    def _add(self, tool: RegisteredTool) -> str:
        """Give ``tool`` its exported name (and namespace) in this export; returns the name."""
        rule = NAME_RULES[self.format]
        if self.format == "openai-responses" and tool.defer_loading:
            namespace = self._namespaces.get(tool.toolkit)
            if namespace is None:
                namespace = fitted_name(
                    tool.toolkit, self._taken, invalid=rule.invalid, max_length=rule.max_length
                )
                self._namespaces[tool.toolkit] = namespace
            inside = self._inside.setdefault(namespace, set())
            name = fitted_name(tool.name, inside, invalid=rule.invalid, max_length=rule.max_length)
            self._exported[tool.id] = name
            self.names[f"{namespace}.{name}"] = f"{tool.id}@{tool.version}"
            return name
        short = self._short_names.get(tool.id, tool.id)
        name = fitted_name(
            short if re.fullmatch(rule.pattern, short) else short.replace(".", "__"),
            self._taken,
            invalid=rule.invalid,
            max_length=rule.max_length,
            must_start=rule.must_start,
        )
        self._exported[tool.id] = name
        self.names[name] = f"{tool.id}@{tool.version}"
        return name

    def arguments(self, exported_name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments of a call that came back under ``exported_name``, as the tool takes
        them: for Gemini, arguments exported as JSON text are decoded (text that is not JSON
        is left as it is, for the tool's validation to report)."""
        decoded = copy.deepcopy(dict(arguments))
        for path in self.json_arguments.get(exported_name, []):
            _decode_at(decoded, path.split("."))
        return decoded

    def name_of(self, tool: RegisteredTool | str) -> str:
        """The exported name of a tool (a ``RegisteredTool`` or its ``toolkit.name`` id)."""
        tool_id = tool if isinstance(tool, str) else tool.id
        try:
            return self._exported[tool_id]
        except KeyError:
            raise UnknownToolError(tool_id) from None

    def tool_references(self, tools: Iterable[Any]) -> list[dict[str, str]]:
        """Anthropic ``tool_reference`` blocks for search hits (or tools), in order: the
        content of the ``tool_result`` a custom tool-search tool returns, which makes Claude
        load those deferred tools.

        Raises:
            UnknownToolError: A tool is not in this export (export every tool the search
                may return, with ``defer_loading``, before the conversation starts).
        """
        return [
            {"type": "tool_reference", "tool_name": self.name_of(tool)}
            for tool in registered_tools(tools)
        ]

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"format": self.format, "tools": self.tools, "names": self.names}
        if self.json_arguments:
            found["json_arguments"] = self.json_arguments
        return found


def _decode_at(arguments: dict[str, Any], path: list[str]) -> None:
    head, rest = path[0], path[1:]
    if head.endswith("[]"):
        items = arguments.get(head[:-2])
        if not isinstance(items, list):
            return
        for i, item in enumerate(items):
            if rest and isinstance(item, dict):
                _decode_at(item, rest)
            elif not rest and isinstance(item, str):
                items[i] = _json_or_text(item)
        return
    value = arguments.get(head)
    if rest and isinstance(value, dict):
        _decode_at(value, rest)
    elif not rest and isinstance(value, str):
        arguments[head] = _json_or_text(value)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # the model's text, nested past the parser: as is
        return text


def tool_items(tools: Iterable[Any]) -> list[Any]:
    """The items of a ``SearchResult`` (its hits), a ``ToolPage`` (its tools) or an iterable."""
    from ..models import SearchResult, ToolPage

    if isinstance(tools, SearchResult):
        return list(tools.hits)
    if isinstance(tools, ToolPage):
        return list(tools.tools)
    return list(tools)


def registered_tools(tools: Iterable[Any]) -> list[RegisteredTool]:
    """RegisteredTools from tools, search hits, a ``SearchResult`` or a ``ToolPage``."""
    from ..models import RegisteredTool, SearchHit

    found: list[RegisteredTool] = []
    for item in tool_items(tools):
        tool = item.tool if isinstance(item, SearchHit) else item
        if not isinstance(tool, RegisteredTool):
            raise InvalidQueryError(
                f"cannot export {type(item).__name__}: expected tools, search hits or addresses"
            )
        found.append(tool)
    return found


def export_tools(
    tools: Iterable[RegisteredTool],
    format: str,
    short_names: Mapping[str, str] | None = None,
    toolkit_descriptions: Mapping[str, str] | None = None,
) -> ExportedTools:
    """``tools`` in ``format``.

    Args:
        tools: The tools to export.
        format: One of ``FORMATS``.
        short_names: Tool id → the shortest unambiguous address (``name`` or
            ``toolkit.name``); the exported name is built from it. Default: the tool id.
        toolkit_descriptions: Toolkit → description, for OpenAI Responses namespaces.
    """
    if format not in FORMATS:
        raise InvalidQueryError(f"unknown export format {format!r}; choose one of {FORMATS}")
    result = ExportedTools(
        format=format,
        tools=[],
        _toolkit_descriptions=dict(toolkit_descriptions or {}),
        _short_names=dict(short_names or {}),
    )
    declarations: list[dict[str, Any]] = []
    namespaces: dict[str, dict[str, Any]] = {}
    for tool in registered_tools(tools):
        if tool.id in result._exported:
            continue
        name = result._add(tool)
        declaration = _declaration(tool, name, format, result)
        if format == "openai-responses" and tool.defer_loading:
            declaration["defer_loading"] = True
            group = namespaces.get(tool.toolkit)
            if group is None:
                group = namespaces[tool.toolkit] = result._namespace_entry(tool.toolkit, [])
                declarations.append(group)
            group["tools"].append(declaration)
        else:
            declarations.append(declaration)
    result.tools = [{"functionDeclarations": declarations}] if format == "gemini" else declarations
    return result


def _declaration(
    tool: RegisteredTool, name: str, format: str, result: ExportedTools
) -> dict[str, Any]:
    description = tool.description
    if format == "gemini":
        parameters, notes, json_paths = gemini_schema(tool.parameters)
        if json_paths:
            result.json_arguments[name] = json_paths
        if notes:
            description = f"{description}\n\nArgument notes: {'; '.join(notes)}"
        declaration: dict[str, Any] = {"name": name, "description": description}
        if parameters.get("properties"):  # Gemini rejects an OBJECT without properties
            declaration["parameters"] = parameters
        return declaration
    if format == "mcp":
        return mcp_tool(tool, name)
    parameters = object_schema(tool.parameters)
    if format == "openai-chat":
        return {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": parameters},
        }
    if format == "openai-responses":
        return {
            "type": "function",
            "name": name,
            "description": description,
            "parameters": parameters,
            "strict": False,
        }
    declaration = {"name": name, "description": description, "input_schema": parameters}
    if tool.defer_loading:
        declaration["defer_loading"] = True
    return declaration


def mcp_tool(tool: RegisteredTool, name: str) -> dict[str, Any]:
    """The MCP ``tools/list`` entry for ``tool`` (as JSON, not an SDK object)."""
    entry: dict[str, Any] = {
        "name": name,
        "description": tool.description,
        "inputSchema": object_schema(tool.parameters),
    }
    annotations = tool.annotations
    if annotations is not None and annotations.title:
        entry["title"] = annotations.title
    if tool.output_schema is not None and tool.output_schema.get("type") == "object":
        entry["outputSchema"] = tool.output_schema  # MCP output schemas describe objects only
    hints = {
        "title": annotations.title if annotations else None,
        "readOnlyHint": annotations.read_only if annotations else None,
        "destructiveHint": annotations.destructive if annotations else None,
        "idempotentHint": True if tool.idempotent else None,
        "openWorldHint": annotations.open_world if annotations else None,
    }
    hints = {k: v for k, v in hints.items() if v is not None}
    if hints:
        entry["annotations"] = hints
    entry["_meta"] = {"toolcat/id": tool.id, "toolcat/version": tool.version}
    return entry


def _copied(value: Any) -> Any:
    """``copy.deepcopy(value)`` for a JSON tree, in under half its time (``search_tools``
    copies each new hit's schema); anything but dicts, lists and scalars goes to deepcopy."""
    kind = type(value)
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with ``type: object`` at the top and no ``anyOf``/``oneOf``/``allOf``/
    ``enum``/``not`` there (OpenAI, Anthropic and MCP reject those): alternatives are merged
    into one object whose properties are all of theirs and whose required ones are those every
    alternative requires."""
    out = {k: _copied(v) for k, v in schema.items() if k not in ("$schema", "$id")}
    notes: list[str] = []
    for key in ("allOf", "anyOf", "oneOf"):
        parts = out.pop(key, None)
        if not isinstance(parts, list):
            continue
        properties = dict(out.get("properties") or {})
        required_sets: list[set[str]] = []
        for part in parts:
            if not isinstance(part, dict):
                continue
            properties.update(part.get("properties") or {})
            required_sets.append(set(part.get("required") or []))
        required = set(out.get("required") or [])
        if key == "allOf":
            required |= set().union(*required_sets) if required_sets else set()
        elif required_sets:
            required |= set.intersection(*required_sets)
            alternatives = " | ".join(", ".join(sorted(s)) or "(none)" for s in required_sets)
            notes.append(f"give exactly one set of these arguments: {alternatives}")
        out["properties"] = properties
        if required:
            out["required"] = sorted(required)
    for key in ("enum", "not"):
        out.pop(key, None)
    out["type"] = "object"
    out.setdefault("properties", {})
    if notes:
        description = out.get("description")
        out["description"] = "; ".join([description, *notes] if description else notes)
    return out


def gemini_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    """``schema`` rewritten into the OpenAPI subset Gemini accepts, notes on what had to go
    (for the description), and the argument paths turned into JSON text.

    ``$ref`` is inlined (recursion cut at a depth), type lists become ``nullable``, ``const``
    becomes a one-value ``enum``, ``oneOf`` becomes ``anyOf``, ``allOf`` is merged, ``enum`` of
    non-strings is dropped, and unknown keywords are dropped. Gemini refuses an object without
    properties, so a free-form object argument becomes a string holding JSON, which
    ``ExportedTools.arguments`` decodes when the call comes back.
    """
    top = object_schema(schema)
    rewrite = _GeminiRewrite({**(top.get("definitions") or {}), **(top.get("$defs") or {})})
    converted = rewrite.node(top, "", 0)
    return converted, list(dict.fromkeys(rewrite.notes)), rewrite.json_paths


@dataclass
class _GeminiRewrite:
    definitions: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    json_paths: list[str] = field(default_factory=list)
    inlined: int = 0  # characters of JSON copied in from references so far
    _sizes: dict[str, int] = field(default_factory=dict)  # a definition's JSON size, by name

    def _size(self, name: str, target: Any) -> int:
        if name not in self._sizes:
            self._sizes[name] = len(json.dumps(target, default=str))
        return self._sizes[name]

    def node(self, node: Any, path: str, depth: int) -> dict[str, Any]:
        if not isinstance(node, dict):
            return self._as_json_text({}, path)
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            target = self.definitions.get(name)
            if target is None or depth >= MAX_REF_DEPTH:
                return self._as_json_text(node, path)
            self.inlined += self._size(name, target)
            if self.inlined > MAX_INLINED_BYTES:
                self.notes.append(f"references past {MAX_INLINED_BYTES} characters are JSON text")
                return self._as_json_text(node, path)
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return self.node(merged, path, depth + 1)
        node = self._merge_all_of(dict(node), path, depth)
        if "oneOf" in node:
            node["anyOf"] = node.pop("oneOf")
        if "const" in node:
            node["enum"] = [node.pop("const")]
        out: dict[str, Any] = {}
        options = node.get("anyOf")
        if isinstance(options, list) and {"type": "null"} in options:
            out["nullable"] = True  # Optional[X] as Gemini spells it
            options = [o for o in options if o != {"type": "null"}]
            node.pop("anyOf")
            if len(options) == 1 and isinstance(options[0], dict):
                node = {**options[0], **node}
            elif options:
                node["anyOf"] = options
        types = node.get("type")
        if isinstance(types, list):
            non_null = [t for t in types if t != "null"]
            if len(non_null) < len(types):
                out["nullable"] = True
            if len(non_null) == 1:
                types = non_null[0]
            else:
                node.setdefault("anyOf", [{"type": t} for t in non_null])
                types = None
        if types is None and "anyOf" not in node:
            types = _infer_type(node)
        if types == "object" and not node.get("properties") and path:
            return self._as_json_text(node, path)
        if isinstance(types, str) and types in GEMINI_TYPES:
            out["type"] = types.upper()
        where = path or "arguments"
        for key, value in node.items():
            if key in ("type", "$defs", "definitions"):
                continue
            if key not in GEMINI_KEYS:
                if key not in ("$schema", "$id", "additionalProperties", "examples"):
                    self.notes.append(f"{where}: {key}={json.dumps(value)[:80]}")
            elif key == "properties" and isinstance(value, dict):
                out["properties"] = {
                    prop: self.node(sub, f"{path}.{prop}".lstrip("."), depth)
                    for prop, sub in value.items()
                }
            elif key == "items":
                out["items"] = self.node(value, f"{path}[]", depth)
            elif key == "anyOf" and isinstance(value, list):
                out["anyOf"] = [self.node(v, path, depth) for v in value]
            elif key == "enum":
                if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                    out["enum"] = value
                    out.setdefault("type", "STRING")
                else:
                    self.notes.append(f"{where} is one of {json.dumps(value)[:120]}")
            elif key == "format":
                if value in GEMINI_FORMATS.get(str(out.get("type", "")).lower(), set()):
                    out["format"] = value
                else:
                    self.notes.append(f"{where} has format {value}")
            elif key == "required" and isinstance(value, list):
                known = set((node.get("properties") or {}).keys())
                kept = [r for r in value if r in known]
                if kept:
                    out["required"] = kept
            else:
                out[key] = value
        if "type" not in out and "anyOf" not in out and path:
            return self._as_json_text(node, path)  # any JSON value: Gemini needs a type
        if out.get("type") == "ARRAY" and "items" not in out:
            out["items"] = {"type": "STRING"}
        if "anyOf" in out:
            out.pop("type", None)
        return out

    def _merge_all_of(self, node: dict[str, Any], path: str, depth: int) -> dict[str, Any]:
        parts = node.pop("allOf", None)
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and isinstance(part.get("$ref"), str):
                part = self.definitions.get(part["$ref"].rsplit("/", 1)[-1]) or {}
            if not isinstance(part, dict):
                continue
            for key, value in part.items():
                if key == "properties":
                    node["properties"] = {**(node.get("properties") or {}), **value}
                elif key == "required":
                    node["required"] = sorted({*(node.get("required") or []), *value})
                else:
                    node.setdefault(key, value)
        return node

    def _as_json_text(self, node: Mapping[str, Any], path: str) -> dict[str, Any]:
        self.json_paths.append(path)
        description = node.get("description") if isinstance(node, Mapping) else None
        hint = "a JSON value, written as JSON text"
        return {
            "type": "STRING",
            "description": f"{description} ({hint})" if description else hint.capitalize(),
        }


def _infer_type(node: Mapping[str, Any]) -> str | None:
    if "properties" in node:
        return "object"
    if "items" in node:
        return "array"
    if "enum" in node:
        return "string"
    return None
