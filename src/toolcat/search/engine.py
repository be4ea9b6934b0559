"""Search orchestration: which mode, the request's parts and vectors, ranking, exact names
first.

One ``SearchEngine`` per catalog holds what is worth keeping between queries (BM25 term
statistics and the vector matrix, both refreshed when the catalog revision moves). The
``Catalog`` façade validates the request, plans it (``plan``) and hands ``search`` a way to
open a read snapshot and to turn a ``Scope`` into filters.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..definitions.construct import construct
from ..errors import EmbeddingError, InvalidQueryError
from ..store import reader
from ..store.reader import Filters
from ..text.tokenize import tokenize
from . import bm25, calibration, fusion, modes, split
from .embeddings import DEFAULT_MODEL, QueryEncodingFailed, VectorIndex, embedder
from .kept import KeptAtRevision
from .lexical_index import LexicalIndex, TantivyIndex
from .postings import PostingsIndex
from .regex import regex_search
from .scope import Scope

if TYPE_CHECKING:
    from ..models import RegisteredTool, SearchResult

SEARCH_MODES = modes.SEARCH_MODES
VECTOR_MODES = modes.VECTOR_MODES
# Hybrid: how many hits each ranking contributes to fusion (search/fusion.py).
HYBRID_DEPTH = 50
# Which fusion hybrid mode ranks by: "hybrid" (fusion.hybrid_fusion, per-query BM25 weight
# from the query's visibility, name hits) or "score" (the former min-max score fusion at
# HYBRID_WEIGHTS), kept to measure side by side (README, "Hybrid fusion").
HYBRID_FUSION = "hybrid"
HYBRID_WEIGHTS = (0.45, 0.55)  # (bm25, embedding)
MAX_QUERY_CHARS = 100_000
# BM25 from the in-memory postings index from this many queries at one revision on: a
# one-shot command asks FTS5 once instead of building an index it would use once.
POSTINGS_AFTER = 2
# From this many tools on the index is built in the background (1–12 s at 10k–100k tools)
# while FTS5 answers; smaller catalogs build in the query that asks (under 0.15 s).
BACKGROUND_BUILD_FROM = 1000
# Tools built for hits, kept per revision (the oldest forgotten first past this many).
HIT_CACHE_SIZE = 4096
# Whether a hit's name is shared within a selection (``Catalog.short_names``), kept per
# revision: a repeated search on a server's event loop reads none.
NAMESAKE_CACHE_SIZE = 4096
# BM25 answers (queries up to MAX_CACHED_QUERY_CHARS, per filters) kept per revision: agents
# repeat requests. The revision read at every query drops them when anything changed.
ANSWER_CACHE_SIZE = 1024
MAX_CACHED_QUERY_CHARS = 1000
# Filters whose allowed tools are kept per revision (the oldest forgotten first).
ALLOWED_CACHE_SIZE = 16
# Tools whose name weights (hybrid fusion) are kept per revision.
NAME_CACHE_SIZE = 200_000


# Hybrid search splits compound requests (search/split.py); README, "Multi-tool requests".
SPLIT_REQUESTS = True


T = TypeVar("T")
# What a search builds: a ``SearchResult`` (``result``) or plain data (``summaries``).
Answer = TypeVar("Answer")
# (row id, score, match) best first.
Ranked = tuple[tuple[int, float, str], ...]
FilterKey = tuple[str, tuple[Any, ...]] | None  # Filters.key
AnswerKey = tuple[str, int, FilterKey]  # (query, k, filters' key)


class Ranking(NamedTuple):
    """A search's answer before its tools are read."""

    revision: int
    query: str
    mode: str
    ranked: Ranked
    warnings: tuple[str, ...]


def _hits(ranking: Ranking, tools: Mapping[int, T]) -> list[tuple[int, float, str, T]]:
    """(rank, score, match, tool) of each ranked tool that ``tools`` holds (by row id), best
    first."""
    found = [(tools[i], score, match) for i, score, match in ranking.ranked if i in tools]
    return [
        (rank, round(score, 6), match, tool) for rank, (tool, score, match) in enumerate(found, 1)
    ]


def _answer(ranking: Ranking, hits: list[Any]) -> dict[str, Any]:
    """A search answer's fields, in ``SearchResult``'s order."""
    return {
        "revision": ranking.revision,
        "query": ranking.query,
        "mode": ranking.mode,
        "hits": hits,
        "warnings": list(ranking.warnings),
    }


@functools.cache
def embeddings_installed() -> bool:
    """Whether vectors can be made here (found once per process, not imported): numpy,
    onnxruntime and tokenizers (the packaged retriever, ONNX exports), or
    sentence-transformers."""
    import importlib.util

    found = importlib.util.find_spec
    onnx = all(found(m) is not None for m in ("numpy", "onnxruntime", "tokenizers"))
    return onnx or found("sentence_transformers") is not None


class SearchEngine:
    """Ranks a catalog's tools for a query in any mode.

    Args:
        embedding_model: The model asked for; default the catalog's, else ``DEFAULT_MODEL``.
    """

    def __init__(self, embedding_model: str | None = None) -> None:
        self.embedding_model = embedding_model
        self.term_stats = bm25.TermStats()
        self.postings = LexicalIndex()
        self.vectors = VectorIndex()
        self._bm25_queries = (-1, 0)  # (revision, BM25 queries asked at it)
        # Row id -> tool built for a hit; (query, k, filters' key) -> (ranked, warnings);
        # (filters' key, tool name) -> whether more than one tool they let through has it.
        self.built: KeptAtRevision[int, RegisteredTool]
        self.answers: KeptAtRevision[AnswerKey, tuple[Ranked, tuple[str, ...]]]
        self.namesakes: KeptAtRevision[tuple[FilterKey, str], bool]
        self.modes: KeptAtRevision[str, str]  # model -> the best mode (``best_mode``)
        self.forget_kept()
        self._names: dict[int, fusion.NameWeight] = {}  # row id -> name weight, at:
        self._names_revision = -1
        # filters' SQL -> the row ids they let through, at:
        self._allowed_ids: dict[FilterKey, frozenset[int]] = {}
        self._allowed_revision = -1

    def forget_kept(self, revision: int | None = None) -> None:
        """Start new stores of kept answers, built hit tools and shared names: the file was
        replaced by another copy (a replica's), whose rows the kept ones may not be.
        Whoever shares the old stores keeps them. With the ``revision`` the new copy is at
        (it replaced one found damaged): the vector matrix and BM25 index are this
        engine's anew, holding nothing, made again from the new copy (read whole, loaded
        or built: ``LexicalIndex.forgotten``); readers of the old copy still under way keep
        the old ones, and what they load, build or bring forward from the old copy is
        never served to the new copy's readers."""
        if revision is not None:
            self.vectors = VectorIndex()
            self.postings = self.postings.forgotten(revision)
        self.built = KeptAtRevision(HIT_CACHE_SIZE)
        self.answers = KeptAtRevision(ANSWER_CACHE_SIZE)
        self.namesakes = KeptAtRevision(NAMESAKE_CACHE_SIZE)
        self.modes = KeptAtRevision(4)

    # -- which model, which mode ----------------------------------------------------------

    def models(self, conn: sqlite3.Connection, asked: str | None = None) -> tuple[Any, str]:
        """(the model the catalog's vectors come from, the model to use)."""
        recorded = reader.meta(conn, "embedding_model")
        return recorded, str(asked or self.embedding_model or recorded or DEFAULT_MODEL)

    def model_id(self, conn: sqlite3.Connection) -> str:
        """The embedding model in use; refuses one that differs from the catalog's vectors."""
        recorded, wanted = self.models(conn)
        if recorded and wanted != recorded and reader.has_vectors(conn, recorded):
            raise EmbeddingError(
                f"this catalog's vectors come from {recorded!r}, not {wanted!r}: run "
                f"`toolcat reindex --model {wanted}` to switch, or use {recorded!r}"
            )
        return wanted

    def best_mode(self, conn: sqlite3.Connection) -> str:
        """Hybrid when embeddings are installed and the catalog has vectors, else BM25;
        kept per revision (whether the model has vectors can be a scan of the embeddings
        table: nothing indexes the model alone)."""
        known = self.known_best_mode(conn)
        if known is not None:
            return known
        revision, wanted = reader.revision(conn), self.models(conn)[1]
        mode = "hybrid" if reader.has_vectors(conn, wanted) else "bm25"
        self.modes.keep(revision, {wanted: mode})
        return mode

    def known_best_mode(self, conn: sqlite3.Connection) -> str | None:
        """``best_mode`` when it costs no scan (kept at this revision, or no embeddings
        installed), else None."""
        if not embeddings_installed():
            return "bm25"
        return self.modes.get(reader.revision(conn), self.models(conn)[1])

    def plan(self, conn: sqlite3.Connection, mode: str | None) -> tuple[str, str]:
        """(mode, embedding model id, or "" when the mode needs none) for a query."""
        mode = self.checked_mode(mode) or self.best_mode(conn)
        return mode, self.model_id(conn) if mode in VECTOR_MODES else ""

    @staticmethod
    def checked_mode(mode: str | None) -> str | None:
        if mode is not None and mode not in SEARCH_MODES:
            raise InvalidQueryError(f"unknown search mode {mode!r}; use one of {SEARCH_MODES}")
        return mode

    @staticmethod
    def encode_query(model_id: str, text: str) -> Any:
        """The query's vector (milliseconds of CPU: call it outside the catalog's lock)."""
        return embedder(model_id).encode_query(text)

    @staticmethod
    def encode_queries(model_id: str, texts: list[str]) -> list[Any]:
        """``encode_query`` for several texts in one model call."""
        return embedder(model_id).encode_queries(texts)

    # -- the search path ------------------------------------------------------------------

    def search(
        self,
        snapshot: Callable[[], AbstractContextManager[sqlite3.Connection]],
        filters: Callable[[sqlite3.Connection, Scope], Filters],
        answer: Callable[[sqlite3.Connection, Ranking], Answer],
        query: str,
        plan: tuple[str, str],
        k: int,
        scope: Scope,
        principal: str | None = None,
    ) -> Answer:
        """A query ranked and built by ``answer`` (``result`` or ``summaries``) in one read
        snapshot (``snapshot()``; ``filters`` turns ``scope`` into the snapshot's filters);
        with ``principal``, reordered by that caller's own recorded uses
        (``learned.lifted``).

        ``plan``: (mode, model id) from ``plan``. In hybrid mode the request is split into
        parts (search/split.py); the request and its parts are encoded in one model call,
        outside the snapshot. A query encoder that fails or cannot serve
        (``QueryEncodingFailed``) turns the search into BM25 with a note, never an error. An
        empty query is list mode: the first ``k`` always-on tools, in list order.
        """
        mode, model_id = plan
        if not query.strip():
            with snapshot() as conn:
                listing = filters(conn, replace(scope, include_deferred=False))
                listed = [(row[0], 0.0, "weak") for row in reader.list_rows(conn, listing, None, k)]
                return answer(conn, Ranking(reader.revision(conn), query, mode, tuple(listed), ()))
        pieces = split.split_request(query) if mode == "hybrid" and SPLIT_REQUESTS else []
        query_vector = None
        parts: list[tuple[str, Any]] = []
        fell_back = ""
        if model_id:  # the request and its parts in one model call
            try:
                query_vector, *part_vectors = self.encode_queries(model_id, [query, *pieces])
                parts = list(zip(pieces, part_vectors, strict=True))
            except QueryEncodingFailed as e:
                mode, model_id, fell_back = "bm25", "", str(e)
        with snapshot() as conn:
            ranking = self.rank(
                conn,
                query,
                mode=mode,
                model_id=model_id,
                query_vector=query_vector,
                filters=filters(conn, scope),
                k=k,
                parts=parts,
            )
            if fell_back:
                ranking = ranking._replace(warnings=(fell_back, *ranking.warnings))
            return self._answered(conn, ranking, principal, answer)

    def kept(
        self,
        snapshot: Callable[[], AbstractContextManager[sqlite3.Connection]],
        filters: Callable[[sqlite3.Connection, Scope], Filters],
        answer: Callable[[sqlite3.Connection, Ranking], Answer],
        query: str,
        mode: str | None,
        k: int,
        scope: Scope,
        principal: str | None = None,
    ) -> Answer | None:
        """``search``'s answer when it costs no ranking and no tool read: a BM25 ranking of
        ``query`` kept at the snapshot's revision (``mode`` BM25, or None and BM25 known to be
        the best at that revision), its in-memory index loaded and every hit's tool built;
        None otherwise, with nothing ranked, read or built. What is left is a few indexed
        reads (the revision, the scope's toolkit, the principal's uses), so a server may
        answer a repeated request on its event loop."""
        mode = self.checked_mode(mode)
        if not query.strip():
            return None
        with snapshot() as conn:
            if (mode or self.known_best_mode(conn)) != "bm25":
                return None  # the best mode not known here: finding it may be a scan
            revision, ranking = self._kept(conn, query, "bm25", filters(conn, scope), k)
            if (
                ranking is None
                or self._index(conn, revision) is None  # else a query may start building it
                or not self.built.holds(revision, (row_id for row_id, _, _ in ranking.ranked))
            ):
                return None
            return self._answered(conn, ranking, principal, answer)

    @staticmethod
    def _answered(
        conn: sqlite3.Connection,
        ranking: Ranking,
        principal: str | None,
        answer: Callable[[sqlite3.Connection, Ranking], Answer],
    ) -> Answer:
        """``ranking`` reordered by ``principal``'s own uses (``learned.lifted``) and built
        by ``answer``."""
        if principal is not None:
            from .learned import lifted

            ranking = lifted(conn, ranking, principal)
        return answer(conn, ranking)

    # -- ranking --------------------------------------------------------------------------

    def result(self, conn: sqlite3.Connection, ranking: Ranking) -> SearchResult:
        """The ``SearchResult`` of a ranking: its tools built (kept per revision)."""
        from ..models import SearchHit, SearchResult

        tools = self._tools(conn, [row_id for row_id, _, _ in ranking.ranked], ranking.revision)
        hits = [  # in SearchHit's field order: a constructed model dumps in this order
            construct(SearchHit, {"rank": rank, "score": score, "tool": tool, "match": match})
            for rank, score, match, tool in _hits(ranking, tools)
        ]
        return construct(SearchResult, _answer(ranking, hits))

    @staticmethod
    def summaries(conn: sqlite3.Connection, ranking: Ranking) -> dict[str, Any]:
        """A ranking as plain data, built without models (pydantic is not imported: it was
        a fifth of a one-shot hybrid ``toolcat search``): ``{"revision", "query", "mode",
        "hits": [{"rank", "score", "match", "tool": RegisteredTool.summary()}],
        "warnings", "no_match"}`` (``no_match`` as ``SearchResult.no_match`` says it)."""
        rows = reader.rows_by_id(conn, [row_id for row_id, _, _ in ranking.ranked])
        summaries = {row_id: reader.row_to_summary(row) for row_id, row in rows.items()}
        hits = [
            {"rank": rank, "score": score, "match": match, "tool": tool}
            for rank, score, match, tool in _hits(ranking, summaries)
        ]
        return {**_answer(ranking, hits), "no_match": all(h["match"] == "none" for h in hits)}

    def rank(
        self,
        conn: sqlite3.Connection,
        query: str,
        *,
        mode: str,
        model_id: str,
        query_vector: Any,
        filters: Filters,
        k: int,
        parts: Sequence[tuple[str, Any]] = (),
    ) -> Ranking:
        """Rank the tools ``filters`` lets through, inside one read transaction ``conn``
        (``result`` or ``summaries`` then builds the answer in the same transaction).

        Exact tool names (``name`` or ``toolkit.name``, any case) come first, except in
        regex mode, where the query is a pattern. ``parts`` (hybrid mode): the request's
        parts (search/split.py) with their vectors; each part's best tool joins the top
        when it fits the part clearly (``split.fits``).
        """
        text = query[:MAX_QUERY_CHARS]
        revision, kept = self._kept(conn, query, mode, filters, k)
        if kept is not None:
            self._index_asked(conn, revision)
            return kept
        key = (
            (query, k, filters.key)
            if mode == "bm25" and len(query) <= MAX_CACHED_QUERY_CHARS
            else None
        )
        warnings: list[str] = []
        signals: dict[int, fusion.Candidate] = {}
        context = None
        if mode == "regex":
            ranked = regex_search(conn, text, filters, k)
            exact: list[int] = []
        else:
            ranked, signals = self._rank(
                conn, mode, text, (model_id, query_vector), filters, k, warnings, revision
            )
            per_part: list[list[tuple[int, float]]] = []
            tops: list[int] = []  # each part's best tool
            part_signals: dict[int, fusion.Candidate] = {}
            for part, vector in parts:
                found, found_signals = self._rank(
                    conn, mode, part, (model_id, vector), filters, 1, [], revision
                )
                best = found_signals.get(found[0][0]) if found else None
                if best is None:
                    continue
                tops.append(found[0][0])
                if split.fits(best.semantic, best.cover):
                    per_part.append(found)
                    for item, candidate in found_signals.items():
                        part_signals.setdefault(item, candidate)
            if mode == "hybrid" and HYBRID_FUSION == "hybrid":  # the whole request, not its parts
                if tops:  # each part's best tool gains in the whole ranking (fusion.py)
                    ranked = fusion.lift_part_tops(signals, tops, k, fusion.params_for(model_id))
                context = calibration.query_context(signals, calibration.for_model(model_id))
            if parts:
                for item, candidate in part_signals.items():
                    signals.setdefault(item, candidate)
                ranked = split.merge(ranked, per_part, k)
            exact = reader.exact_matches(conn, text, filters)
        top = ranked[0][1] if ranked else 0.0
        ordered = [(row_id, top + 1.0, "strong") for row_id in exact]
        ordered += [
            (i, s, calibration.match(signals.get(i), mode, context))
            for i, s in ranked
            if i not in exact
        ]
        answer = (tuple(calibration.down_the_ranks(ordered[:k])), tuple(warnings))
        if key is not None:
            self.answers.keep(revision, {key: answer})
        return Ranking(revision, query, mode, *answer)

    def _kept(
        self, conn: sqlite3.Connection, query: str, mode: str, filters: Filters, k: int
    ) -> tuple[int, Ranking | None]:
        """(the current revision, the BM25 ranking of ``query`` kept at it or None):
        ``rank`` keeps each one it makes. Refuses a toolkit version that is not active, as
        ``rank`` does."""
        if filters.toolkit_id is not None and not reader.is_active_toolkit(
            conn, filters.toolkit_id
        ):
            raise InvalidQueryError(
                "search covers active versions only; that toolkit version is not active. "
                "List its tools with list(toolkit=...) instead."
            )
        revision = reader.revision(conn)
        if mode != "bm25" or len(query) > MAX_CACHED_QUERY_CHARS:
            return revision, None
        kept = self.answers.get(revision, (query, k, filters.key))
        return revision, None if kept is None else Ranking(revision, query, mode, *kept)

    def _tools(
        self, conn: sqlite3.Connection, ids: list[int], revision: int
    ) -> dict[int, RegisteredTool]:
        """The tools of these rows, kept for the revision (agents ask similar queries: the
        hits of a warm search are mostly built already)."""
        known = self.built.found(revision, ids)
        missing = [i for i in ids if i not in known]
        if not missing:
            return known
        read = reader.tools_by_id(conn, missing)
        self.built.keep(revision, read)
        known.update(read)
        return {i: known[i] for i in ids if i in known}

    def _rank(
        self,
        conn: sqlite3.Connection,
        mode: str,
        text: str,
        query: tuple[str, Any],
        filters: Filters,
        k: int,
        warnings: list[str],
        revision: int,
    ) -> tuple[list[tuple[int, float]], dict[int, fusion.Candidate]]:
        """((row id, score) best first, what fusion knows of each tool) for the bm25,
        embedding and hybrid modes."""
        depth = max(k, HYBRID_DEPTH) if mode == "hybrid" else k
        tokens = list(dict.fromkeys(tokenize(text)))  # the query's distinct terms, tokenized once
        lexical: list[tuple[int, float]] = []
        semantic: list[tuple[int, float]] = []
        if mode in ("bm25", "hybrid"):
            lexical = self.bm25(conn, text, filters, depth, revision, tokens)
        if mode != "bm25":
            semantic = self._semantic(conn, query, filters, depth, revision, mode, warnings)
        if mode != "hybrid":  # signals (for ``match``) of the hits returned only
            lexical, semantic = lexical[:k], semantic[:k]
        terms = tokens[: bm25.MAX_QUERY_TERMS]
        ids = list(dict.fromkeys([i for i, _ in lexical] + [i for i, _ in semantic]))
        documents = self._documents(conn, revision, ids, terms) if terms and ids else {}
        if terms:
            self.term_stats.refresh(conn, revision)
        if mode != "hybrid":
            doc_freq = self.term_stats.lookup(conn, terms) if terms else {}
            signals = fusion.candidates(
                terms, doc_freq, self.term_stats.n_docs, lexical, semantic, documents
            )
            return (lexical if mode == "bm25" else semantic)[:k], signals
        # Hybrid also weighs the candidates' names by IDF (fusion.name_hit), kept per tool.
        names = self._name_weights(conn, revision, documents)
        doc_freq = self.term_stats.lookup(conn, terms)
        if HYBRID_FUSION == "score":
            signals = fusion.candidates(
                terms, doc_freq, self.term_stats.n_docs, lexical, semantic, documents
            )
            fused = fusion.score_fusion(
                [(HYBRID_WEIGHTS[0], lexical), (HYBRID_WEIGHTS[1], semantic)], k
            )
            return fused, signals
        return fusion.hybrid_fusion(
            terms,
            doc_freq,
            self.term_stats.n_docs,
            lexical,
            semantic,
            documents,
            depth,
            k,
            fusion.params_for(query[0]),
            names=names,
        )

    def _name_weights(
        self, conn: sqlite3.Connection, revision: int, documents: dict[int, fusion.Document]
    ) -> dict[int, fusion.NameWeight]:
        """Each candidate's ``fusion.name_weight``, computed once per tool and revision."""
        if revision != self._names_revision or len(self._names) > NAME_CACHE_SIZE:
            self._names, self._names_revision = {}, revision
        known = self._names
        missing = [(i, d[0]) for i, d in documents.items() if i not in known]
        if missing:
            words = list(dict.fromkeys(t for _, name in missing for t in name.split()))
            doc_freq = self.term_stats.lookup(conn, words)
            n_docs = self.term_stats.n_docs
            weights = {t: fusion.idf(n_docs, doc_freq.get(t, 0)) for t in words}
            for i, name in missing:
                known[i] = fusion.name_weight(name, weights)
        return known

    def _documents(
        self, conn: sqlite3.Connection, revision: int, ids: list[int], terms: list[str]
    ) -> dict[int, fusion.Document]:
        """What fusion reads of these tools: from the in-memory index of the revision when
        there is one (no SQL, no re-splitting columns), else from their ``tools_fts`` rows."""
        index = self._index(conn, revision)
        found = index.documents(ids, terms) if index is not None else None
        if found is not None:
            return found
        return {i: fusion.fts_document(c, terms) for i, c in reader.fts_rows(conn, ids).items()}

    def _semantic(
        self,
        conn: sqlite3.Connection,
        query: tuple[str, Any],
        filters: Filters,
        depth: int,
        revision: int,
        mode: str,
        warnings: list[str],
    ) -> list[tuple[int, float]]:
        model_id, query_vector = query  # (model id, query vector) for the vector modes
        if embedder(model_id).note:
            warnings.append(embedder(model_id).note)
        allowed = self._allowed(conn, revision, filters)
        with self.vectors.lock:  # shared by a server's readers (Catalog.share_indexes)
            self.vectors.refresh(conn, revision, model_id, getattr(conn, "path", "") or "")
            missing, active = self.vectors.missing, self.vectors.active_tools
            found = self.vectors.search(query_vector, depth, allowed)
        if missing:
            warnings.append(
                f"{missing} of {active} active tools have no vector for {model_id}"
                + (" and are found by BM25 only" if mode == "hybrid" else " and cannot be found")
                + "; run `toolcat reindex` (Catalog.reindex()) to embed them"
            )
        return found

    def bm25(
        self,
        conn: sqlite3.Connection,
        text: str,
        filters: Filters,
        k: int,
        revision: int,
        tokens: Sequence[str] | None = None,
    ) -> list[tuple[int, float]]:
        """BM25 alone: (row id, score) best first. ``tokens``: ``text``'s distinct terms,
        when the caller has tokenized it already.

        Queries use the in-memory index (search/lexical_index.py: tantivy's candidates
        scored as FTS5 scores them; filters applied as ``reader.allowed_ids``, kept per
        revision) once a revision has been asked ``POSTINGS_AFTER`` times and the index is
        built (in the background from ``BACKGROUND_BUILD_FROM`` tools on); those before ask
        FTS5.
        """
        weights = bm25.DEFAULT_WEIGHTS
        if tokens is None:
            tokens = list(dict.fromkeys(tokenize(text)))
        index = self._index_asked(conn, revision)
        if index is not None:
            useful = bm25.useful_terms(tokens, index.doc_freq, index.n_docs, bm25.MAX_QUERY_TERMS)
            return index.rank(useful, k, self._allowed(conn, revision, filters))
        self.term_stats.refresh(conn, revision)
        return bm25.search(conn, text, filters, k, self.term_stats, weights, tokens=tokens)

    def _allowed(
        self, conn: sqlite3.Connection, revision: int, filters: Filters
    ) -> frozenset[int] | None:
        """The row ids ``filters`` lets through (None: every tool), kept per revision: a
        scoped caller (the MCP server's teams, a policy's deny rules) filters every query
        the same way."""
        key = filters.key
        if key is None:
            return None
        if revision != self._allowed_revision:
            self._allowed_ids, self._allowed_revision = {}, revision
        found = self._allowed_ids.get(key)
        if found is None:
            if len(self._allowed_ids) >= ALLOWED_CACHE_SIZE:
                del self._allowed_ids[next(iter(self._allowed_ids))]  # the oldest first
            found = self._allowed_ids[key] = reader.allowed_ids(conn, filters)
        return found

    def _index_asked(
        self, conn: sqlite3.Connection, revision: int
    ) -> TantivyIndex | PostingsIndex | None:
        """The in-memory index of this revision for a BM25 query (a kept answer
        counts too): built, or started building, at the ``POSTINGS_AFTER``-th such query."""
        index = self._index(conn, revision)
        if index is None:
            seen, count = self._bm25_queries
            count = count + 1 if seen == revision else 1
            self._bm25_queries = (revision, count)
            if count >= POSTINGS_AFTER:
                self._make_index(conn, revision)
                index = self._index(conn, revision)
        return index

    def _make_index(self, conn: sqlite3.Connection, revision: int) -> None:
        """Serve ``revision`` from the in-memory index: loaded from the one its last write
        saved (search/lexical_file.py) when there is one, else built, on a background
        thread from ``BACKGROUND_BUILD_FROM`` tools on (FTS5 answers meanwhile)."""
        weights = bm25.DEFAULT_WEIGHTS
        self.term_stats.refresh(conn, revision)
        if self.term_stats.n_docs < BACKGROUND_BUILD_FROM:
            self.postings.build(conn, revision, weights)
            return
        path = getattr(conn, "path", "") or ""
        if not self.postings.load_saved(conn, revision, weights, path):
            self.postings.build_soon(conn, revision, weights, path)

    def warm_vectors(self, conn: sqlite3.Connection, revision: int, mode: str | None) -> None:
        """Read ``revision``'s vector matrix now when searches in ``mode`` (default: the best
        one) use it (a server, before it answers, and before ``warm_bm25``: read beside a
        big catalog's BM25 build, which holds the GIL for most of a minute at 1M tools, it
        took 27 s instead of 9)."""
        _, model_id = self.plan(conn, mode)
        if model_id:
            with self.vectors.lock:
                self.vectors.refresh(conn, revision, model_id, getattr(conn, "path", "") or "")

    def warm_bm25(self, conn: sqlite3.Connection, revision: int) -> None:
        """Make ``revision``'s in-memory BM25 index now (a server before it answers): the
        next query is ranked by it, not by FTS5, unless a big catalog's index is still
        being built in the background (nothing was saved at this revision)."""
        if self._index(conn, revision) is None:
            self._make_index(conn, revision)

    def _index(
        self, conn: sqlite3.Connection, revision: int
    ) -> TantivyIndex | PostingsIndex | None:
        """The in-memory index of this revision, if built; its term frequencies then
        replace FTS5's vocabulary lookups."""
        index = self.postings.at(revision, bm25.DEFAULT_WEIGHTS)
        if index is not None:
            self.term_stats.adopt(conn, revision, index.doc_freq)
        return index

    def suggest(
        self,
        conn: sqlite3.Connection,
        name: str,
        *,
        filters: Filters | None = None,
        admits: Callable[[RegisteredTool], bool] | None = None,
    ) -> list[str]:
        """Close matches for an unknown tool name: the same name in another case, similar
        spellings (catalogs up to 20k tools), then BM25 over the name's words. Only tools
        that ``filters`` let through and ``admits`` accepts are suggested (a caller's scope:
        what is outside it is never named)."""
        import difflib

        filters = filters or Filters()

        def admitted(tools: Iterable[RegisteredTool]) -> list[str]:
            return [t.id for t in tools if admits is None or admits(t)]

        exact = admitted(t for _, t in reader.find_tools(conn, name, nocase=True, filters=filters))
        if exact:
            return exact[:5]
        suggestions: list[str] = []
        ids = reader.active_tool_ids(conn, limit=20_000, filters=filters)
        if ids is not None:
            by_name: dict[str, list[str]] = {}
            for tool_id in ids:
                by_name.setdefault(tool_id.split(".", 1)[1].lower(), []).append(tool_id)
            for close in difflib.get_close_matches(name.lower(), by_name, n=3, cutoff=0.75):
                if admits is None:
                    suggestions += by_name[close]
                else:
                    for tool_id in by_name[close]:
                        toolkit, _, tool_name = tool_id.partition(".")
                        found = reader.find_tools(conn, tool_name, toolkit=toolkit, filters=filters)
                        suggestions += admitted(t for _, t in found)
        ranked = self.bm25(conn, name, filters, 5, reader.revision(conn))
        suggestions += admitted(reader.tools_by_id(conn, [i for i, _ in ranked]).values())
        return list(dict.fromkeys(suggestions))[:5]
