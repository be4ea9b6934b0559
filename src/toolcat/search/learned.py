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
from ..store import writer
from ..store.reader import revision
from .bm25 import TermStats
from .documents import schema_texts
from .fusion import idf
from .split import split_request
from .tokenize import tokenize, tokenize_all


def answered_by(
    conn: sqlite3.Connection, uses: Sequence[tuple[str, str]]
) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """For (query, tool id) uses about to be recorded: query key -> every tool that answered
    it (these and those recorded before), and the earlier (toolkit, name, query) uses of a
    compound request that now has several tools, which are to be recorded again as parts."""
    answered: dict[str, set[str]] = {}
    for text, tool_id in uses:
        answered.setdefault(writer.query_key(text), set()).add(tool_id)
    compound = [key for key in answered if split_request(key)]
    rewrite = []
    for toolkit, name, query in writer.recorded_for(conn, compound):
        tools = answered[writer.query_key(query)]
        if f"{toolkit}.{name}" not in tools:
            tools.add(f"{toolkit}.{name}")
            rewrite.append((toolkit, name, query))
    return answered, [r for r in rewrite if len(answered[writer.query_key(r[2])]) > 1]


def lessons(
    conn: sqlite3.Connection,
    uses: Sequence[tuple[str, RegisteredTool]],
    answered: dict[str, set[str]],
) -> list[tuple[str, str, str]]:
    """(toolkit, tool name, text to learn) per use: the whole request when one tool answered
    it (its other parts may be that tool's arguments), else the tool's own part."""
    return [
        (tool.toolkit, tool.name, text)
        if len(answered[writer.query_key(text)]) < 2
        else (tool.toolkit, tool.name, answered_part(conn, text, tool))
        for text, tool in uses
    ]


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
    stats = TermStats()
    stats.refresh(conn, revision(conn))
    doc_freq = stats.lookup(conn, terms)
    return {t: idf(stats.n_docs, doc_freq[t]) for t in terms}
