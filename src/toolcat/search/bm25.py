"""BM25 search over the catalog's SQLite FTS5 index.

Index text is tokenized by ``tokenize`` before it reaches FTS5, and so is every query: user
text becomes a list of quoted terms joined by OR, so no user input is ever FTS5 syntax.

FTS5 scores every row that matches any term, at about 1 µs a row. When a query's terms have
more than ``EXACT_POSTINGS`` postings in all (long queries on large catalogs), search runs in
two phases: FTS5 ranks candidates by the rarest terms alone, within that budget, and the
best ``CANDIDATES`` are rescored with every term by ``bm25_scores``, which computes exactly
what FTS5's ``bm25()`` would. Tools that match only common terms can be missed that way; the
README gives the measured cost (top-1 agreement with the one-phase ranking).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping, Sequence

from ..store.counts import index_totals
from ..store.reader import Filters
from ..text.tokenize import tokenize

# name > search hint/examples > description > parameters = tags/toolkit. Chosen with
# scripts/research/tune_bm25.py (mean R@5 over the seven benchmark sources; README,
# "Retrieval quality").
DEFAULT_WEIGHTS: tuple[float, ...] = (4.0, 2.0, 1.5, 0.5, 0.5)
MAX_QUERY_TERMS = 32
EXACT_POSTINGS = 8000
CANDIDATES = 100
K1 = 1.2
B = 0.75


class TermStats:
    """Document frequencies and the document count, cached for one catalog revision.

    FTS5's fts5vocab lookups cost about 30 µs a term; agents repeat words, so a catalog keeps
    one of these and it forgets everything when the revision moves. Where an in-memory
    index of the same revision holds every term's frequency (``adopt``), nothing is asked.
    """

    def __init__(self) -> None:
        self.revision = -1
        self.n_docs = 0
        self.total_tokens = 0
        self.doc_freq: dict[str, int] = {}
        self.complete = False  # doc_freq holds every indexed term (adopted from an index)

    def refresh(self, conn: sqlite3.Connection, revision: int) -> None:
        if revision != self.revision:
            self.revision = revision
            self.n_docs, self.total_tokens = index_totals(conn)
            self.doc_freq, self.complete = {}, False

    def adopt(self, conn: sqlite3.Connection, revision: int, doc_freq: dict[str, int]) -> None:
        """Use an in-memory index's frequencies of every term, built at ``revision`` (read
        only from here on: the index keeps serving them)."""
        self.refresh(conn, revision)
        if not self.complete:
            self.doc_freq, self.complete = doc_freq, True

    def lookup(self, conn: sqlite3.Connection, terms: Sequence[str]) -> dict[str, int]:
        """Document frequency of each term (0 when absent), from the cache or the index."""
        if self.complete:
            get = self.doc_freq.get
            return {t: get(t, 0) for t in terms}
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


def bm25_scores(
    documents: Sequence[tuple[int, Sequence[str]]],
    terms: Sequence[str],
    doc_freq: dict[str, int],
    stats: TermStats,
    weights: Sequence[float],
) -> dict[int, float]:
    """FTS5's ``bm25()`` (negated: higher is better) for tokenized documents.

    Each document is (row id, column texts); a term's frequency is the weighted count of
    its occurrences over the columns, the document length the unweighted token count.
    """
    avgdl = stats.total_tokens / stats.n_docs if stats.n_docs else 1.0
    idf = {}
    for term in terms:
        value = math.log((stats.n_docs - doc_freq[term] + 0.5) / (doc_freq[term] + 0.5))
        idf[term] = value if value > 0 else 1e-6
    wanted = set(terms)
    scores: dict[int, float] = {}
    for row_id, columns in documents:
        freq: dict[str, float] = {}
        length = 0
        for weight, text in zip(weights, columns, strict=True):
            tokens = text.split()
            length += len(tokens)
            for token in tokens:
                if token in wanted:
                    freq[token] = freq.get(token, 0.0) + weight
        norm = K1 * (1 - B + B * length / avgdl)
        scores[row_id] = sum(idf[t] * f * (K1 + 1) / (f + norm) for t, f in freq.items())
    return scores


def query_terms(
    conn: sqlite3.Connection,
    text: str,
    stats: TermStats,
    max_terms: int = MAX_QUERY_TERMS,
    tokens: Sequence[str] | None = None,
) -> list[str]:
    """The terms worth asking FTS5 for, rarest first.

    Terms the index lacks cannot match and are dropped. Terms found in more than half of the
    tools get FTS5's floor IDF (1e-6): they add nothing to a score yet cost the most time, so
    they are dropped too, unless nothing else is left. ``tokens``: ``text``'s distinct
    terms, when the caller has tokenized it already.
    """
    terms = list(dict.fromkeys(tokenize(text))) if tokens is None else list(tokens)
    if not terms:
        return []
    return useful_terms(terms, stats.lookup(conn, terms), stats.n_docs, max_terms)


def useful_terms(
    terms: Sequence[str], doc_freq: Mapping[str, int], n_docs: int, max_terms: int
) -> list[str]:
    """``terms`` (distinct) worth scoring, rarest first, by their document frequencies: the
    rule of ``query_terms``, shared by the in-memory indexes."""
    present = sorted((t for t in terms if doc_freq.get(t)), key=doc_freq.__getitem__)
    useful = [t for t in present if doc_freq[t] * 2 <= n_docs] or present
    return useful[:max_terms]


def match_expression(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: each term a quoted string, joined by OR."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _fts_rank(
    conn: sqlite3.Connection,
    terms: Sequence[str],
    filters: Filters,
    limit: int,
    weights: Sequence[float],
) -> list[tuple[int, float]]:
    bm25 = f"bm25(tools_fts, {', '.join(str(float(w)) for w in weights)})"
    if not filters.narrows:
        sql = (
            f"SELECT rowid, {bm25} AS score FROM tools_fts WHERE tools_fts MATCH ? "
            "ORDER BY score LIMIT ?"
        )
        params: list[object] = [match_expression(terms), limit]
    else:
        where, more = filters.sql(active_only=False)
        sql = (
            f"SELECT t.id, {bm25} AS score FROM tools_fts JOIN tools t ON t.id = tools_fts.rowid "
            f"WHERE tools_fts MATCH ? AND {where} ORDER BY score LIMIT ?"
        )
        params = [match_expression(terms), *more, limit]
    return [(row[0], -row[1]) for row in conn.execute(sql, params).fetchall()]


def search(
    conn: sqlite3.Connection,
    text: str,
    filters: Filters,
    k: int,
    stats: TermStats,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    exact_postings: int = EXACT_POSTINGS,
    tokens: Sequence[str] | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` best tools for ``text`` as (tool row id, score), best first; higher is better.

    ``stats`` must have been refreshed for the catalog's current revision; ``tokens``:
    ``text``'s distinct terms, when the caller has tokenized it already.
    """
    terms = query_terms(conn, text, stats, tokens=tokens)
    if not terms:
        return []
    doc_freq = stats.lookup(conn, terms)
    rare: list[str] = []
    postings = 0
    for term in terms:  # rarest first
        if rare and postings + doc_freq[term] > exact_postings:
            break
        rare.append(term)
        postings += doc_freq[term]
    if len(rare) == len(terms):
        return _fts_rank(conn, terms, filters, k, weights)
    candidates = _fts_rank(conn, rare, filters, max(CANDIDATES, k), weights)
    if not candidates:
        return []
    ids = [row_id for row_id, _ in candidates]
    rows = conn.execute(
        "SELECT rowid, name, hint, description, params, tags FROM tools_fts "
        f"WHERE rowid IN ({','.join('?' * len(ids))})",
        ids,
    ).fetchall()
    scores = bm25_scores([(r[0], r[1:]) for r in rows], terms, doc_freq, stats, weights)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:k]
