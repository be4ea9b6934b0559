"""BM25 search over the catalog's SQLite FTS5 index.

Index text is tokenized by ``tokenize`` before it reaches FTS5, and so is every query: user
text becomes a list of quoted terms joined by OR, so no user input is ever FTS5 syntax.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..store.reader import Filters
from .tokenize import tokenize

# name > search hint/examples > description > parameters > tags/toolkit (DESIGN.md);
# the values were chosen with `toolcat eval` (see README, "Choosing the BM25 weights").
DEFAULT_WEIGHTS: tuple[float, ...] = (4.0, 2.0, 1.5, 1.0, 0.5)
MAX_QUERY_TERMS = 32


class TermStats:
    """Document frequencies and the document count, cached for one catalog revision.

    FTS5's fts5vocab lookups cost about 30 µs a term; agents repeat words, so a catalog keeps
    one of these and it forgets everything when the revision moves.
    """

    def __init__(self) -> None:
        self.revision = -1
        self.n_docs = 0
        self.doc_freq: dict[str, int] = {}

    def refresh(self, conn: sqlite3.Connection, revision: int) -> None:
        if revision != self.revision:
            self.revision = revision
            self.n_docs = conn.execute("SELECT count(*) FROM tools_fts").fetchone()[0]
            self.doc_freq = {}

    def lookup(self, conn: sqlite3.Connection, terms: Sequence[str]) -> dict[str, int]:
        """Document frequency of each term (0 when absent), from the cache or the index."""
        missing = [t for t in terms if t not in self.doc_freq]
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            found = dict(
                conn.execute(
                    "SELECT term, doc FROM tools_fts_vocab "
                    f"WHERE term IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            )
            if len(self.doc_freq) > 100_000:
                self.doc_freq.clear()
            self.doc_freq.update({t: found.get(t, 0) for t in chunk})
        return {t: self.doc_freq.get(t, 0) for t in terms}


def query_terms(
    conn: sqlite3.Connection, text: str, stats: TermStats, max_terms: int = MAX_QUERY_TERMS
) -> list[str]:
    """The terms worth asking FTS5 for, rarest first.

    Terms the index lacks cannot match and are dropped. Terms found in more than half of the
    tools get FTS5's floor IDF (1e-6): they add nothing to a score yet cost the most time, so
    they are dropped too, unless nothing else is left.
    """
    terms = list(dict.fromkeys(tokenize(text)))
    if not terms:
        return []
    doc_freq = stats.lookup(conn, terms)
    present = sorted((t for t in terms if doc_freq[t]), key=lambda t: doc_freq[t])
    useful = [t for t in present if doc_freq[t] * 2 <= stats.n_docs] or present
    return useful[:max_terms]


def match_expression(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: each term a quoted string, joined by OR."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def search(
    conn: sqlite3.Connection,
    text: str,
    filters: Filters,
    k: int,
    stats: TermStats,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
) -> list[tuple[int, float]]:
    """The ``k`` best tools for ``text`` as (tool row id, score), best first; higher is better.

    ``stats`` must have been refreshed for the catalog's current revision.
    """
    terms = query_terms(conn, text, stats)
    if not terms:
        return []
    bm25 = f"bm25(tools_fts, {', '.join(str(float(w)) for w in weights)})"
    if not filters.narrows:
        sql = (
            f"SELECT rowid, {bm25} AS score FROM tools_fts WHERE tools_fts MATCH ? "
            "ORDER BY score LIMIT ?"
        )
        params: list[object] = [match_expression(terms), k]
    else:
        where, more = filters.sql(active_only=False)
        sql = (
            f"SELECT t.id, {bm25} AS score FROM tools_fts JOIN tools t ON t.id = tools_fts.rowid "
            f"WHERE tools_fts MATCH ? AND {where} ORDER BY score LIMIT ?"
        )
        params = [match_expression(terms), *more, k]
    return [(row[0], -row[1]) for row in conn.execute(sql, params).fetchall()]
