"""BM25 search over the catalog's SQLite FTS5 index.

Index text is tokenized by ``tokenize`` before it reaches FTS5, and so is every query: user
text becomes a list of quoted terms joined by OR, so no user input is ever FTS5 syntax.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from ..models import Tool, Toolkit
from ..store.reader import Filters
from .tokenize import tokenize, tokenize_all

COLUMNS = ("name", "hint", "description", "params", "tags")
# name > search hint/examples > description > parameters > tags/toolkit (DESIGN.md);
# the values were chosen with `toolcat eval` (see README, "Choosing the BM25 weights").
DEFAULT_WEIGHTS: tuple[float, ...] = (4.0, 2.0, 1.5, 1.0, 0.5)
MAX_QUERY_TERMS = 32
MAX_SCHEMA_DEPTH = 4


def schema_texts(schema: Any, depth: int = 0) -> Iterator[str]:
    """Parameter names, descriptions and string enum values of a JSON Schema, nested ones too."""
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


def index_fields(tool: Tool, toolkit: Toolkit) -> tuple[str, str, str, str, str]:
    """The text of each FTS5 column for one tool, already tokenized."""
    return (
        " ".join(tokenize(tool.name)),
        " ".join(tokenize_all([tool.search_hint, *tool.examples])),
        " ".join(tokenize(tool.description)),
        " ".join(tokenize_all(schema_texts(tool.parameters))),
        " ".join(tokenize_all([*tool.tags, *toolkit.tags, toolkit.name, toolkit.description])),
    )


def query_terms(conn: sqlite3.Connection, text: str, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The terms worth asking FTS5 for, rarest first.

    Terms the index lacks cannot match and are dropped. Terms found in more than half of the
    tools get FTS5's floor IDF (1e-6): they add nothing to a score yet cost the most time, so
    they are dropped too, unless nothing else is left.
    """
    terms = list(dict.fromkeys(tokenize(text)))
    if not terms:
        return []
    doc_freq: dict[str, int] = {}
    for start in range(0, len(terms), 500):
        chunk = terms[start : start + 500]
        marks = ",".join("?" * len(chunk))
        doc_freq.update(
            conn.execute(
                f"SELECT term, doc FROM tools_fts_vocab WHERE term IN ({marks})", chunk
            ).fetchall()
        )
    present = sorted((t for t in terms if t in doc_freq), key=lambda t: doc_freq[t])
    if not present:
        return []
    n_docs = conn.execute("SELECT count(*) FROM tools").fetchone()[0]
    useful = [t for t in present if doc_freq[t] * 2 <= n_docs] or present
    return useful[:max_terms]


def match_expression(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: each term a quoted string, joined by OR."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def search(
    conn: sqlite3.Connection,
    text: str,
    filters: Filters,
    k: int,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
) -> list[tuple[int, float]]:
    """The ``k`` best tools for ``text`` as (tool row id, score), best first; higher is better."""
    terms = query_terms(conn, text)
    if not terms:
        return []
    where, params = filters.sql()
    bm25 = f"bm25(tools_fts, {', '.join(str(float(w)) for w in weights)})"
    rows = conn.execute(
        f"SELECT t.id, {bm25} AS score FROM tools_fts "
        "JOIN tools t ON t.id = tools_fts.rowid JOIN toolkits k ON k.id = t.toolkit_id "
        f"WHERE tools_fts MATCH ? AND {where} ORDER BY score LIMIT ?",
        [match_expression(terms), *params, k],
    ).fetchall()
    return [(row[0], -row[1]) for row in rows]
