"""What a recorded use teaches: the part of the request that the tool answered.

A compound request ("Check the cleaning status of the pool. Then show the maintenance
history of the Main branch") is answered by several tools, and each call records a use. Had
each tool learned the whole request, every one would also learn the others' words, and a
later request for any one part would pull all of them up (measured: on sealtools, where three
requests in four are compound, learning from whole requests lowered R@5). So a use keeps the
part (``split_request``, as hybrid search splits) whose words carry the most of the tool's
own text, weighted by rarity; a request that does not split, or whose parts name nothing of
the tool, is kept whole.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..models import RegisteredTool
from .bm25 import index_totals
from .documents import schema_texts
from .fusion import idf
from .split import split_request
from .tokenize import tokenize, tokenize_all


def answered_part(conn: sqlite3.Connection, query: str, tool: RegisteredTool) -> str:
    """The part of ``query`` that ``tool`` answers (``query`` itself when it is one request)."""
    parts = split_request(query)
    if len(parts) < 2:
        return query
    own = set(
        tokenize_all(
            [
                *tokenize(tool.name),
                tool.description,
                tool.search_hint,
                *tool.examples,
                *schema_texts(tool.parameters),
            ]
        )
    )
    terms = [list(dict.fromkeys(tokenize(part))) for part in parts]
    weights = _weights(conn, sorted({t for ts in terms for t in ts}))
    scores = [sum(weights[t] for t in ts if t in own) for ts in terms]
    best = max(range(len(parts)), key=lambda i: (scores[i], -i))
    return parts[best] if scores[best] > 0 else query


def _weights(conn: sqlite3.Connection, terms: Sequence[str]) -> dict[str, float]:
    n_docs = index_totals(conn)[0]
    found: dict[str, int] = {}
    for start in range(0, len(terms), 500):
        chunk = list(terms[start : start + 500])
        marks = ",".join("?" * len(chunk))
        found.update(
            conn.execute(
                f"SELECT term, doc FROM tools_fts_vocab WHERE term IN ({marks})", chunk
            ).fetchall()
        )
    return {t: idf(n_docs, found.get(t, 0)) for t in terms}
