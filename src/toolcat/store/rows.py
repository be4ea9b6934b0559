"""The rows a toolkit version becomes: each tool's stored definition, content hash, tags and
FTS5 text, made without touching SQLite.

They are made apart from writing so that a worker process can make them for its manifests
while the writer stores another's (``registry/parallel.py``); ``check_rows`` is what the
writer checks before it trusts rows it did not make.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import TYPE_CHECKING, Any, NamedTuple

from ..definitions import walks
from ..models import (
    Tool,
    ToolAnnotations,
    canonical_members,
    canonical_object,
    canonical_tree_json,
    text_hash,
)
from ..text.documents import index_fields, toolkit_terms

if TYPE_CHECKING:
    from ..models import ToolHead, Toolkit, ToolkitHead


class ToolRow(NamedTuple):
    """One tool's row of ``tools``, its tags and its FTS5 columns (no learned queries: those
    are the catalog's, added when it is indexed)."""

    name: str
    defer_loading: bool
    tags: tuple[str, ...]
    tags_json: str
    definition: str
    content_hash: str
    fts: tuple[str, str, str, str, str]


@dataclass(frozen=True)
class ToolkitRows:
    """A toolkit version's content hash and its tools' rows, in the toolkit's order."""

    digest: str
    tools: list[ToolRow]


# Parameters deeper than this are dumped by pydantic (a schema's usual depth is under 10).
PLAIN_PARAMETERS_DEPTH = 64


def tool_definition(tool: Tool) -> dict[str, Any]:
    """What the catalog stores of a tool (its canonical JSON is the ``definition`` column):
    ``tool.model_dump(mode="json", exclude_none=True)``, keys in any order."""
    return _definition(tool, _plain(tool))


def _definition(tool: Tool, plain: bool) -> dict[str, Any]:
    """``tool_definition``, ``plain`` being ``_plain(tool)``: the parameters of a plain tool
    are what pydantic's JSON dump of them gives, ``None`` values kept, so they are taken as
    they are (the tool's own dict, not a copy): their dump was 13 of a tool's 15.5 µs."""
    if plain:
        dumped = tool.model_dump(mode="json", exclude_none=True, exclude={"parameters"})
        dumped["parameters"] = tool.parameters
        return dumped
    return tool.model_dump(mode="json", exclude_none=True)


def _plain(tool: Tool) -> bool:
    """Whether pydantic's JSON dump of ``tool`` is its values as they are, but for the None
    fields it leaves out of the tool and of its annotations: a ``Tool`` (not a subclass,
    whose serializers may differ) whose annotations are ``ToolAnnotations`` or None and
    whose values are plain JSON (``walks.plain_json``, in C where it was built). pydantic
    also leaves out the None fields of any model deeper in (a model in the parameters,
    say), and dumps a dict given as the annotations (``model_construct``) as it is."""
    annotations = tool.annotations
    if type(tool) is not Tool:
        return False
    if annotations is not None and (
        type(annotations) is not ToolAnnotations or not walks.plain_json(annotations.__dict__, 1)
    ):
        return False
    values = {**tool.__dict__, "annotations": None}
    return walks.plain_json(values, PLAIN_PARAMETERS_DEPTH + 1)


def tags_json(tags: Sequence[str]) -> str:
    """``json.dumps(list(tags))`` of text tags, each encoded as ``json.dumps`` encodes it:
    ``dumps`` builds an encoder a call, ~2 us a tool in the worker and again in the check
    of its answer."""
    return "[" + ", ".join(map(encode_basestring_ascii, tags)) + "]"


def effective_tags(tool: Tool, toolkit: Toolkit) -> list[str]:
    """A tool's own tags, then its toolkit's: what tag filters match."""
    return list(dict.fromkeys([*tool.tags, *toolkit.tags]))


def rows_of(toolkit: Toolkit) -> ToolkitRows:
    """The rows of a validated toolkit."""
    shared = toolkit_terms(toolkit)
    tools = []
    members = []
    every_plain = True
    for tool in toolkit.tools:
        plain = _plain(tool)
        every_plain = every_plain and plain
        dumped = _definition(tool, plain)
        encoded = canonical_members(dumped)
        members.append((encoded, dumped.get("annotations")))
        definition = _tool_object(encoded)
        tags = effective_tags(tool, toolkit)
        tools.append(
            ToolRow(
                tool.name,
                toolkit.defer_loading if tool.defer_loading is None else tool.defer_loading,
                tuple(tags),
                tags_json(tags),
                definition,
                text_hash(definition),
                index_fields(tool, toolkit, (), shared),
            )
        )
    # pydantic leaves out more than a plain tool's None fields from the others: dumped whole
    digest = toolkit_hash(toolkit, members) if every_plain else toolkit.content_hash()
    return ToolkitRows(digest, tools)


def toolkit_hash(
    toolkit: Toolkit, definitions: list[tuple[dict[str, str], dict[str, Any] | None]]
) -> str:
    """``toolkit.content_hash()`` of a toolkit whose tools are all plain (``_plain``), from
    their definitions, made anyway: each tool's ``tool_definition`` as encoded members
    (``canonical_members``) with its annotations as dumped. Neither is the toolkit dumped
    a second time (~25 µs a tool of pydantic) nor are its tools encoded again.

    ``content_hash`` dumps every field, ``None`` ones too; ``tool_definition`` leaves out
    the ``None`` fields of the tool and of its annotations (a parameters schema is a plain
    dict: its ``null`` values are kept by both), so they are put back here. The same text,
    hence the same hash (tests/store/test_rows.py checks it field by field)."""
    annotation_fields = ToolAnnotations.model_fields
    tools = []
    for encoded, dumped_annotations in definitions:
        if dumped_annotations is not None:
            whole = {field: dumped_annotations.get(field) for field in annotation_fields}
            encoded = {**encoded, "annotations": canonical_tree_json(whole)}
        tools.append(_tool_object(encoded, absent="null"))
    # dumped by pydantic, as ``content_hash`` dumps it: a tree of plain values, whatever a
    # toolkit made without validation (``model_construct``) holds
    head = canonical_members(toolkit.model_dump(mode="json", by_alias=False, exclude={"tools"}))
    head["tools"] = "[" + ",".join(tools) + "]"
    return text_hash(canonical_object(head))


def _tool_object(encoded: dict[str, str], absent: str | None = None) -> str:
    """``canonical_object`` of a tool's encoded members, its keys' order known beforehand;
    with ``absent``, of every field of ``Tool``, that text for each one ``encoded`` lacks."""
    keys = _tool_keys()
    if absent is not None:
        return "{" + ",".join([key + encoded.get(field, absent) for field, key in keys]) + "}"
    parts = [key + encoded[field] for field, key in keys if field in encoded]
    return "{" + ",".join(parts) + "}" if len(parts) == len(encoded) else canonical_object(encoded)


@functools.cache
def _tool_keys() -> tuple[tuple[str, str], ...]:
    """(field, its key's JSON and colon) of every field of ``Tool``, sorted."""
    return tuple((field, encode_basestring(field) + ":") for field in sorted(Tool.model_fields))


def check_rows(toolkit: Toolkit | ToolkitHead, rows: Any) -> str | None:
    """What is wrong with ``rows`` made elsewhere for ``toolkit`` (``None``: nothing found).

    Checks their shape and types, that they name the toolkit's tools in order, and that each
    definition matches its hash and parses to an object named for its tool: a torn, garbled
    or foreign answer is told apart from the rows of this toolkit."""
    if type(rows) is not ToolkitRows or type(rows.tools) is not list:
        return f"not rows but {type(rows).__name__}"
    if not _is_hash(rows.digest):
        return "the toolkit's content hash is not a SHA-256"
    if len(rows.tools) != len(toolkit.tools):
        return f"{len(rows.tools)} tool rows for {len(toolkit.tools)} tools"
    tools: Sequence[Tool | ToolHead] = toolkit.tools
    for row, tool in zip(rows.tools, tools, strict=True):
        problem = _row_problem(row, tool)
        if problem:
            return f"tool {tool.name!r}: {problem}"
    return None


_TEXT_ONLY = frozenset([str])


def _row_problem(row: Any, tool: Tool | ToolHead) -> str | None:
    # (the fields unpacked and the types read in C: a fifth of what this check cost a tool)
    if type(row) is not ToolRow or len(row) != len(ToolRow._fields):
        return f"a {type(row).__name__}, not a row"
    name, defer_loading, tags, tags_text, definition, content_hash, fts = row
    if name != tool.name:
        return f"the row names {name!r}"
    if type(defer_loading) is not bool:
        return "defer_loading is not a boolean"
    if type(tags) is not tuple:  # (``*row.tags`` of None raised from this check)
        return "the tags are not a tuple"
    if type(tags_text) is not str or type(definition) is not str:
        return "a text column is not text"
    if not _TEXT_ONLY.issuperset(map(type, tags)):
        return "a text column is not text"
    if type(fts) is not tuple or len(fts) != 5:
        return "the FTS5 columns are not five"
    if not _TEXT_ONLY.issuperset(map(type, fts)):
        return "an FTS5 column is not text"
    if text_hash(definition) != content_hash:
        return "the definition does not match its hash"
    # Canonical JSON holds the name exactly so (parsing every definition again would cost
    # a tenth of what the worker saved)
    if f'"name":{encode_basestring(tool.name)},' not in definition:
        return "the definition is not this tool's"
    if tags_json(tags) != tags_text:
        return "the tags do not match their JSON"
    return None


def _is_hash(value: Any) -> bool:
    return type(value) is str and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
