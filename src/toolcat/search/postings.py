"""An in-memory BM25 index derived from the FTS5 table, for processes that search often.

SQLite stays the system of record. The index is built from ``tools_fts`` (the already
tokenized column texts) inside the caller's read transaction and stamped with the catalog
revision it was built at; a search at any other revision never uses it, so a stale index is
never served, and since it lives only in the process's memory there is nothing on disk that
a ``kill -9`` could tear. Scores are exactly FTS5's ``bm25()`` with the same column weights
(same IDF, same length normalisation): the ranking is the one the FTS5 path gives, only
faster — no SQL per query and no scoring of documents that cannot reach the top ``k``.

Each posting holds the term's whole BM25 contribution to one document (IDF times the
saturated, length-normalised term frequency), so a query only adds numbers. Terms are taken
best bound first; once no document outside the current candidates can reach the ``k``-th
score (MaxScore), the remaining terms are only looked up for the surviving candidates. The
answer is exact.
"""

from __future__ import annotations

import heapq
import math
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Sequence

from ..text.tokenize import tokenize
from .bm25 import useful_terms
from .fusion import Document

K1 = 1.2
B = 0.75


class TermIndex(ABC):
    """What an in-memory lexical index (this one, ``lexical_index.TantivyIndex``) is: built
    from ``tools_fts`` at one catalog revision and column weights, it knows each term's
    document frequency and each tool's name column, and ranks a query's terms."""

    def __init__(self) -> None:
        self.revision = -1
        self.weights: tuple[float, ...] = ()
        self.n_docs = 0
        self.doc_freq: dict[str, int] = {}
        self.names: dict[int, str] = {}  # row id -> tokenized name column (fusion's signals)

    def current(self, revision: int, weights: Sequence[float]) -> bool:
        return self.revision == revision and self.weights == tuple(weights)

    def terms(self, text: str, max_terms: int) -> list[str]:
        """The query's terms worth scoring, rarest first: as ``bm25.query_terms`` — terms
        the index lacks are dropped, and those in more than half of the tools too (they
        carry FTS5's floor IDF) unless nothing else is left."""
        return useful_terms(
            list(dict.fromkeys(tokenize(text))), self.doc_freq, self.n_docs, max_terms
        )

    def search(self, text: str, k: int, max_terms: int) -> list[tuple[int, float]]:
        """The ``k`` best (row id, score), best first (ties by row id)."""
        return self.rank(self.terms(text, max_terms), k)

    @abstractmethod
    def rank(
        self, terms: Sequence[str], k: int, allowed: frozenset[int] | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` best (row id, score) for index terms (as ``terms`` returns them); with
        ``allowed`` (``reader.allowed_ids``), among those tools only."""


class PostingsIndex(TermIndex):
    """Term → {tool row id: BM25 contribution}, for one catalog revision."""

    def __init__(self) -> None:
        super().__init__()
        self.postings: dict[str, dict[int, float]] = {}
        self.bound: dict[str, float] = {}

    def build(self, conn: sqlite3.Connection, revision: int, weights: Sequence[float]) -> None:
        """Rebuild from ``tools_fts`` (call inside the read transaction of ``revision``)."""
        freqs: dict[str, dict[int, float]] = {}
        lengths: dict[int, int] = {}
        names: dict[int, str] = {}
        rows = conn.execute("SELECT rowid, name, hint, description, params, tags FROM tools_fts")
        for row in rows:
            doc = row[0]
            names[doc] = row[1] or ""
            length = 0
            for weight, text in zip(weights, row[1:], strict=True):
                if not text:
                    continue
                tokens = text.split()
                length += len(tokens)
                for token in tokens:
                    found = freqs.get(token)
                    if found is None:
                        freqs[token] = {doc: weight}
                    else:
                        found[doc] = found.get(doc, 0.0) + weight
            lengths[doc] = length
        n_docs = len(lengths)
        avgdl = (sum(lengths.values()) / n_docs) if n_docs else 1.0
        norms = {d: K1 * (1 - B + B * n / avgdl) for d, n in lengths.items()}
        postings: dict[str, dict[int, float]] = {}
        bound: dict[str, float] = {}
        for term, docs in freqs.items():
            df = len(docs)
            idf = math.log((n_docs - df + 0.5) / (df + 0.5))
            if idf <= 0:
                idf = 1e-6
            scored = {d: idf * f * (K1 + 1) / (f + norms[d]) for d, f in docs.items()}
            postings[term] = scored
            bound[term] = max(scored.values())
        self.postings, self.bound, self.n_docs, self.names = postings, bound, n_docs, names
        self.doc_freq = {term: len(docs) for term, docs in postings.items()}
        self.revision, self.weights = revision, tuple(weights)

    def documents(self, ids: Sequence[int], terms: Sequence[str]) -> dict[int, Document]:
        """fusion's ``Document`` of each of these tools the index holds."""
        names = self.names
        found: dict[int, Document] = {}
        held: dict[int, set[str]] = {}
        for doc in ids:
            name = names.get(doc)
            if name is not None:
                held[doc] = set()
                found[doc] = (name, held[doc])
        for term in terms:
            postings = self.postings.get(term)
            if postings:
                for doc, has in held.items():
                    if doc in postings:
                        has.add(term)
        return found

    def rank(
        self, terms: Sequence[str], k: int, allowed: frozenset[int] | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` best (row id, score) for index terms (as ``terms`` returns them); with
        ``allowed`` (``reader.allowed_ids``), among those tools only (the bounds stay
        bounds)."""
        terms = sorted(terms, key=lambda t: -self.bound[t])
        if not terms:
            return []
        remaining = [0.0] * (len(terms) + 1)  # remaining[i]: bounds of terms[i:] summed
        for i in range(len(terms) - 1, -1, -1):
            remaining[i] = remaining[i + 1] + self.bound[terms[i]]
        scores: dict[int, float] = {}
        threshold = -1.0  # the k-th best score so far (a floor for the final k-th)
        pruned = False
        for i, term in enumerate(terms):
            postings = self.postings[term]
            if allowed is not None:
                postings = _within(postings, allowed)
            # The k-th score cannot exceed what the terms taken so far add up to: only
            # when the rest could not reach that is the exact k-th worth computing.
            if len(scores) >= k and remaining[i] < remaining[0] - remaining[i]:
                threshold = heapq.nlargest(k, scores.values())[-1]
            if remaining[i] < threshold:
                # No tool outside ``scores`` can reach the k-th score: look the rest up for
                # the candidates still able to.
                if not pruned:
                    floor = threshold - remaining[i]
                    scores = {d: s for d, s in scores.items() if s >= floor}
                    pruned = True
                for d in scores:
                    w = postings.get(d)
                    if w is not None:
                        scores[d] += w
                continue
            if not scores:
                scores = dict(postings)
            else:
                get = scores.get
                for d, w in postings.items():
                    scores[d] = get(d, 0.0) + w
        best = heapq.nsmallest(k, scores.items(), key=lambda item: (-item[1], item[0]))
        return best


def _within(postings: dict[int, float], allowed: frozenset[int]) -> dict[int, float]:
    """The postings of the allowed tools (walking the shorter of the two)."""
    if len(allowed) < len(postings):
        return {d: postings[d] for d in allowed if d in postings}
    return {d: w for d, w in postings.items() if d in allowed}
