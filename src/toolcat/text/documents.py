"""What each tool contributes to the BM25 index: the text of each FTS5 column.

Columns, in weight order (DESIGN.md): the name; the search hint and example queries; the
description; parameter names, descriptions and enum values; tags, toolkit name and description,
and the requests the tool was used for (learning from use).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..definitions import walks
from .tokenize import tokenize, tokenize_all

if TYPE_CHECKING:
    from ..models import Tool, Toolkit

COLUMNS = ("name", "hint", "description", "params", "tags")
MAX_SCHEMA_DEPTH = 4


def schema_texts(schema: Any, depth: int = 0) -> Iterator[str]:
    """Parameter names, descriptions and string enum values of a JSON Schema, nested ones too
    (in C where it was built: definitions/walks.py)."""
    native = walks.compiled()
    if native is not None and depth == 0:
        texts: list[str] | None = native.schema_texts(schema, MAX_SCHEMA_DEPTH)
        if texts is not None:  # not declined
            yield from texts
            return
    if not isinstance(schema, dict) or depth > MAX_SCHEMA_DEPTH:
        return
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, prop in properties.items():
            yield str(name)
            if isinstance(prop, dict):
                description = prop.get("description")
                if isinstance(description, str):
                    yield description
                enum = prop.get("enum")
                if isinstance(enum, list):
                    yield " ".join(v for v in enum if isinstance(v, str))
                yield from schema_texts(prop, depth + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from schema_texts(items, depth + 1)


def toolkit_terms(toolkit: Toolkit) -> list[str]:
    """Index terms a toolkit adds to each of its tools' tags column (the same for every tool:
    a bulk registration tokenizes them once per toolkit, not once per tool)."""
    return tokenize_all([*toolkit.tags, toolkit.name, toolkit.description])


def index_fields(
    tool: Tool,
    toolkit: Toolkit,
    learned: Sequence[str] = (),
    shared: Sequence[str] | None = None,
) -> tuple[str, str, str, str, str]:
    """The text of each FTS5 column for one tool, already tokenized; ``learned`` queries
    (recorded uses) join the lightest column, tags. ``shared`` is ``toolkit_terms(toolkit)``
    when the caller has it.

    In the hint column (weight 2) a request close to one a sibling tool answered lifted the
    sibling above the tool whose own text fits: R@1 fell on bfcl and toolalpaca. At the
    lightest weight they still find the tool (R@5 gains kept) and no longer outvote its
    own words (README, "Learning from use")."""
    if shared is None:
        shared = toolkit_terms(toolkit)
    return (
        " ".join(tokenize(tool.name)),
        " ".join(tokenize_all([tool.search_hint, *tool.examples])),
        " ".join(tokenize(tool.description)),
        " ".join(tokenize_all(schema_texts(tool.parameters))),
        " ".join([*tokenize_all(tool.tags), *shared, *tokenize_all(learned)]),
    )
