"""The in-memory BM25 index long-lived processes search: tantivy finds, Python scores.

SQLite stays the system of record. Like ``PostingsIndex`` (postings.py, the pure-Python
index this one falls back to where ``tantivy`` cannot be imported), the index is built from
``tools_fts`` (the already tokenized column texts) inside the caller's read transaction and
stamped with the catalog revision it was built at; a search at any other revision never uses
it, and it lives only in the process's memory, so there is nothing on disk that a
``kill -9`` could tear.

How it ranks: tantivy (Rust) picks the best ``candidates(k)`` tools for the query's terms
from one text field in which each column's tokens are repeated in proportion to its weight
(name 8x, hint 4x, description 3x, parameters and tags once), and those candidates are then
scored exactly as FTS5's ``bm25()`` scores them (same IDF, weighted term frequencies, length
normalisation over unweighted lengths) from per-tool term counts kept here. The scores
returned are therefore FTS5's; the ranking is FTS5's whenever FTS5's top ``k`` lie within
tantivy's top ``candidates(k)``: measured by scripts/bench_catalog.py (``lexical_top10_*``:
identical top 10 for ~99% of long benchmark queries and top-10 overlap above 0.99 at 10k
tools), and bounded below by tests/search/test_lexical_index.py on real tools.

Why this and not the alternatives (measured at 10k tools, same run, long benchmark queries,
README "Catalog: registration, list, BM25 search"): the pure-Python MaxScore index ranks in
~0.5 ms, ten times tantivy; tantivy's own BM25 ranking (per-field boosts or repeated tokens)
is ~1.5x faster still than this, but its IDF, saturation and quantised lengths differ from
FTS5's, so its top 10 agreed with FTS5's for only ~14% of queries and scores fed to hybrid
fusion would change. Rescoring ``candidates(k)`` tools costs a few microseconds each.

tantivy is an optional dependency (``pip install 'toolcat[fast]'``): a 17 MB compiled wheel
that needs Python 3.11 in its current release and pays off only in processes that search
many times; one-shot commands never build an index (engine.py, ``POSTINGS_AFTER``).
"""

from __future__ import annotations

import functools
import itertools
import math
import sqlite3
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .postings import PostingsIndex
from .tokenize import tokenize

K1 = 1.2
B = 0.75
# Tools tantivy hands over for exact scoring, for a top ``k``: k plus this many, at least.
EXTRA_CANDIDATES = 20
CANDIDATE_FACTOR = 3
# A column's tokens are repeated round(weight / the smallest weight) times, at most this.
MAX_REPEAT = 16
# Term queries kept per revision (agents repeat words); forgotten past this many.
QUERY_CACHE = 50_000
ZEROS = itertools.repeat(0.0)  # what a tool lacking a term adds


def candidates(k: int) -> int:
    """How many tools tantivy proposes for an exact top ``k``."""
    return max(k + EXTRA_CANDIDATES, CANDIDATE_FACTOR * k)


@functools.cache
def tantivy_module() -> Any:
    """The ``tantivy`` module, or None where it is not installed (checked once)."""
    try:
        import tantivy
    except ImportError:
        return None
    return tantivy


def repeats(weights: Sequence[float]) -> list[int]:
    """How often each column's tokens go into tantivy's one field: in proportion to the
    column's weight, the lightest positive column once."""
    positive = [w for w in weights if w > 0]
    if not positive:
        return [0] * len(weights)
    unit = min(positive)
    return [min(MAX_REPEAT, max(1, round(w / unit))) if w > 0 else 0 for w in weights]


class TantivyIndex:
    """tantivy's candidates, FTS5's exact ``bm25()`` scores; one catalog revision."""

    def __init__(self) -> None:
        self.revision = -1
        self.weights: tuple[float, ...] = ()
        self.n_docs = 0
        self.doc_freq: dict[str, int] = {}
        # Row id -> term -> the term's whole bm25() contribution to that tool (IDF times
        # the saturated, length-normalised weighted count): rescoring only adds numbers.
        self.contributions: dict[int, dict[str, float]] = {}
        self._queries: dict[str, Any] = {}  # term -> tantivy term query
        self._row_ids: list[int] = []  # doc id in the one segment -> row id
        self._searcher: Any = None
        self._schema: Any = None

    def current(self, revision: int, weights: Sequence[float]) -> bool:
        return self.revision == revision and self.weights == tuple(weights)

    def build(self, conn: sqlite3.Connection, revision: int, weights: Sequence[float]) -> None:
        """Rebuild from ``tools_fts`` (call inside the read transaction of ``revision``)."""
        tantivy = tantivy_module()
        weights = tuple(weights)
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("id", stored=False, indexed=False, fast=True)
        builder.add_text_field(
            "body", stored=False, tokenizer_name="whitespace", index_option="freq"
        )
        index = tantivy.Index(builder.build())
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        times = repeats(weights)
        counts: dict[int, dict[str, float]] = {}
        lengths: dict[int, int] = {}
        doc_freq: Counter[str] = Counter()
        row_ids: list[int] = []
        rows = conn.execute("SELECT rowid, name, hint, description, params, tags FROM tools_fts")
        for row in rows:
            doc = row[0]
            found: dict[str, float] = {}
            length = 0
            body: list[str] = []
            for weight, repeat, text in zip(weights, times, row[1:], strict=True):
                if not text:
                    continue
                tokens = text.split()
                length += len(tokens)
                for token, n in Counter(tokens).items():  # counted in C, added per distinct
                    found[token] = found.get(token, 0.0) + weight * n
                body += [text] * repeat
            doc_freq.update(found.keys())
            counts[doc], lengths[doc] = found, length
            row_ids.append(doc)
            writer.add_document(tantivy.Document(id=doc, body=" ".join(body)))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        searcher = index.searcher()
        n_docs = len(lengths)
        avgdl = (sum(lengths.values()) / n_docs) if n_docs else 1.0
        idf = {}
        for term, df in doc_freq.items():
            value = math.log((n_docs - df + 0.5) / (df + 0.5))
            idf[term] = (value if value > 0 else 1e-6) * (K1 + 1)
        for doc, found in counts.items():
            norm = K1 * (1 - B + B * lengths[doc] / avgdl)
            counts[doc] = {t: idf[t] * f / (f + norm) for t, f in found.items()}
        self.contributions, self.doc_freq, self.n_docs = counts, dict(doc_freq), n_docs
        # One writer thread and one commit make one segment with documents in the order
        # they were added; anything else is mapped through the "id" fast field.
        self._row_ids = row_ids if searcher.num_segments == 1 else []
        self._searcher, self._schema = searcher, index.schema
        self._queries = {}
        self.revision, self.weights = revision, weights

    def terms(self, text: str, max_terms: int) -> list[str]:
        """The query's terms worth scoring, rarest first: as ``bm25.query_terms`` — terms
        the index lacks are dropped, and those in more than half of the tools too (they
        carry FTS5's floor IDF) unless nothing else is left."""
        doc_freq = self.doc_freq
        present = sorted(
            (t for t in dict.fromkeys(tokenize(text)) if t in doc_freq),
            key=doc_freq.__getitem__,
        )
        useful = [t for t in present if doc_freq[t] * 2 <= self.n_docs] or present
        return useful[:max_terms]

    def search(self, text: str, k: int, max_terms: int) -> list[tuple[int, float]]:
        """The ``k`` best (row id, score), best first (ties by row id)."""
        return self.rank(self.terms(text, max_terms), k)

    def rank(self, terms: Sequence[str], k: int) -> list[tuple[int, float]]:
        """The ``k`` best (row id, score) for index terms (as ``terms`` returns them)."""
        if not terms:
            return []
        tantivy = tantivy_module()
        should = tantivy.Occur.Should
        queries = self._queries
        if len(queries) > QUERY_CACHE:
            queries.clear()
        clauses = []
        for term in terms:
            query = queries.get(term)
            if query is None:
                query = queries[term] = tantivy.Query.term_query(self._schema, "body", term)
            clauses.append((should, query))
        hits = self._searcher.search(
            tantivy.Query.boolean_query(clauses), candidates(k), count=False
        ).hits
        if self._row_ids:
            row_ids = self._row_ids
            found = [row_ids[address.doc] for _, address in hits]
        else:
            found = self._searcher.fast_field_values("id", [address for _, address in hits])
        contributions = self.contributions
        scored = sorted((-sum(map(contributions[doc].get, terms, ZEROS)), doc) for doc in found)
        return [(doc, -score) for score, doc in scored[:k]]


class LexicalIndex:
    """The in-memory BM25 index of one engine: tantivy's where the ``tantivy`` package is
    importable, else the pure-Python postings (same scores). Nothing is imported before the
    first build, so a process that never builds one never loads tantivy."""

    def __init__(self, backend: str | None = None) -> None:
        self.backend = backend  # "tantivy", "postings", or None: tantivy when importable
        self.index: TantivyIndex | PostingsIndex | None = None

    @property
    def revision(self) -> int:
        return self.index.revision if self.index is not None else -1

    @property
    def doc_freq(self) -> dict[str, int]:
        """How many tools hold each indexed term, at ``revision``."""
        return self.index.doc_freq if self.index is not None else {}

    def current(self, revision: int, weights: Sequence[float]) -> bool:
        return self.index is not None and self.index.current(revision, weights)

    def build(self, conn: sqlite3.Connection, revision: int, weights: Sequence[float]) -> None:
        """Rebuild from ``tools_fts`` (call inside the read transaction of ``revision``)."""
        if self.backend is None:
            self.backend = "tantivy" if tantivy_module() is not None else "postings"
        self.index = None  # a stale index is never served, nor kept while its successor builds
        index = TantivyIndex() if self.backend == "tantivy" else PostingsIndex()
        index.build(conn, revision, weights)
        self.index = index

    def search(self, text: str, k: int, max_terms: int) -> list[tuple[int, float]]:
        """The ``k`` best (row id, score), best first; call only when ``current``."""
        assert self.index is not None
        return self.index.search(text, k, max_terms)
