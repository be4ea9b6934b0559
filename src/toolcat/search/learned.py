"""What a recorded use teaches: the part of the request that the tool answered.

A compound request ("Check the cleaning status of the pool. Then show the maintenance
history of the Main branch") is answered by several tools, and each call records a use. Had
each tool learned the whole request, every one would also learn the others' words, and a
later request for any one part would pull all of them up (measured: on sealtools, where three
requests in four are compound, learning from whole requests lowered R@5). So a use keeps the
part (``split_request``, as hybrid search splits) whose words carry the most of the tool's
own text, weighted by rarity; a request that does not split, or whose parts name nothing of
the tool, is kept whole.

Whose uses teach whom (README, "Learning from use"): the catalog's own caller's (the Python
API, the CLI; ``principal=""``) are folded into the shared index at reindex: that caller
already writes the catalog. A server's callers' uses (a principal, or ``anonymous``) are
kept apart and only ``lifted`` within that caller's own results, each tool by at most
``LEARNED_LIFT`` places, so no caller steers what another finds, and callers who share an
identity (anonymous ones) move each other's rankings by at most that much.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..models import RegisteredTool
from ..store import writer
from ..store.reader import exact_among, principal_uses, revision
from ..text.documents import schema_texts
from ..text.tokenize import tokenize, tokenize_all
from .bm25 import TermStats
from .fusion import idf
from .split import split_request

if TYPE_CHECKING:
    from .engine import Ranking

LEARNED_LIFT = 3  # places a caller's own uses may move a tool within its results
LEARNED_OVERLAP = 0.5  # words a request shares with a recorded one (Jaccard) to count


def answered_by(
    conn: sqlite3.Connection, uses: Sequence[tuple[str, str]], principal: str = ""
) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """For (query, tool id) uses about to be recorded: query key -> every tool that answered
    it (these and those recorded before), and the earlier (toolkit, name, query) uses of a
    compound request that now has several tools, which are to be recorded again as parts."""
    answered: dict[str, set[str]] = {}
    for text, tool_id in uses:
        answered.setdefault(writer.query_key(text), set()).add(tool_id)
    compound = [key for key in answered if split_request(key)]
    rewrite = []
    for toolkit, name, query in writer.recorded_for(conn, compound, principal):
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


def lifted(conn: sqlite3.Connection, ranking: Ranking, principal: str) -> Ranking:
    """``ranking`` reordered by ``principal``'s own recorded uses: a hit whose recorded
    requests share at least ``LEARNED_OVERLAP`` of their words with this one moves up by up
    to ``LEARNED_LIFT`` places (in proportion to the overlap). Each hit therefore moves at
    most ``LEARNED_LIFT`` places either way, and nothing outside the ranking is pulled in.
    Tools the query names exactly stay first."""
    ids = [row_id for row_id, *_ in ranking.ranked]
    uses = principal_uses(conn, principal, ids)
    if not uses:
        return ranking
    # Among the hits only: the catalog's other tools of that name are not in the ranking
    # (and may be thousands: a server asks this on its event loop, search_kept).
    named = exact_among(conn, ranking.query, ids)
    first = 0
    while first < len(ranking.ranked) and ranking.ranked[first][0] in named:
        first += 1
    pinned, ranked = ranking.ranked[:first], ranking.ranked[first:]
    words = set(tokenize(ranking.query))

    def overlap(row_id: int) -> float:
        best = 0.0
        for query in uses.get(row_id, ()):
            recorded = set(tokenize(query))
            if words and recorded:
                best = max(best, len(words & recorded) / len(words | recorded))
        return best if best >= LEARNED_OVERLAP else 0.0

    lifts = [LEARNED_LIFT * overlap(row_id) for row_id, *_ in ranked]
    order = sorted(range(len(ranked)), key=lambda p: (p - lifts[p], -lifts[p], p))
    return ranking._replace(ranked=(*pinned, *(ranked[p] for p in order)))
