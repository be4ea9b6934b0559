"""Regex search: a Python regular expression over each tool's name, description and
parameter names and descriptions (the mode Anthropic's tool search offers).

Patterns use Python syntax and are case-sensitive unless they start with ``(?i)``. They are
compiled and run through :mod:`toolcat.definitions.patterns`: a pattern whose counted
repetitions would unroll into a huge program is refused before compiling, and matching has a
time budget, so a pattern that would backtrack forever ends with a clear error instead of
hanging the catalog.
"""

from __future__ import annotations

import sqlite3
import time

from ..definitions import patterns
from ..errors import InvalidQueryError
from ..store.reader import Filters, decode_definition
from ..text.documents import schema_texts

MAX_PATTERN_LENGTH = 500
TIME_BUDGET_S = 2.0
FIELD_WEIGHTS = (("name", 3.0), ("description", 2.0), ("params", 1.0))


def regex_search(
    conn: sqlite3.Connection, pattern: str, filters: Filters, k: int
) -> list[tuple[int, float]]:
    """Tools whose text matches ``pattern`` as (row id, score), best first.

    The score adds 3 for a match in the name, 2 in the description, 1 in parameters.

    Raises:
        InvalidQueryError: The pattern is too long, does not compile, or runs too long.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise InvalidQueryError(f"regex patterns are limited to {MAX_PATTERN_LENGTH} characters")
    try:
        compiled = patterns.compile(pattern, max_length=MAX_PATTERN_LENGTH)
    except patterns.PatternError as e:
        raise InvalidQueryError(str(e)) from None
    where, params = filters.sql(active_only=True)
    rows = conn.execute(
        "SELECT t.id, t.name, t.definition FROM tools t JOIN toolkits k ON k.id = t.toolkit_id "
        f"WHERE {where} ORDER BY t.toolkit, t.name",
        params,
    ).fetchall()
    deadline = time.monotonic() + TIME_BUDGET_S
    hits: list[tuple[int, float]] = []
    for row_id, name, definition in rows:
        data = decode_definition(definition, str(name))
        fields = {
            "name": name,
            "description": data["description"],
            "params": "\n".join(schema_texts(data.get("parameters"))),
        }
        score = 0.0
        for field, weight in FIELD_WEIGHTS:
            try:
                if patterns.search(compiled, fields[field], deadline - time.monotonic()):
                    score += weight
            except patterns.PatternTimeout:
                raise InvalidQueryError(
                    f"regex {pattern!r} ran longer than {TIME_BUDGET_S:g} s over the catalog "
                    "(catastrophic backtracking?); simplify it"
                ) from None
        if score:
            hits.append((row_id, score))
    hits.sort(key=lambda hit: -hit[1])  # stable: equal scores stay in toolkit, name order
    return hits[:k]
