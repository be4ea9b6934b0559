"""The in-memory BM25 index long-lived processes search: tantivy finds, Python scores.

SQLite stays the system of record. Like ``PostingsIndex`` (postings.py, the pure-Python
index this one falls back to where ``tantivy`` cannot be imported), the index is built from
``tools_fts`` (the already tokenized column texts) inside the caller's read transaction and
stamped with the catalog revision it was built at; a search at any other revision never uses
it, and it lives only in the process's memory, so there is nothing on disk that a
``kill -9`` could tear.

How it ranks. The scores returned are exactly FTS5's ``bm25()`` with the catalog's column
weights, and so is the ranking, certified per query:

1. tantivy (Rust) holds one text field per tool, built so that tantivy's own BM25 score of
   a tool is an upper bound of FTS5's, and a close one (0.8% above it at the median, under
   5% at worst, on 10k tools; tests/search/test_lexical_index.py checks the bound, and each
   build checks it on a sample, falling back to a fixed candidate depth if it fails). Each
   column's tokens are repeated in proportion to its weight (name 8x, hint 4x, description
   3x, parameters and tags once), so tantivy's term frequency is FTS5's weighted one times
   ``s`` (= 2); each tool is padded with a filler token and empty documents are added so
   that tantivy's length normalisation, ``K'``, is ``s`` times FTS5's, ``K`` (then
   ``s*f / (s*f + K')`` = ``f / (f + K)``); lengths are rounded down, and tantivy's one-byte
   length codes round down too, so the bound holds; each term query is boosted by FTS5's
   IDF over tantivy's.
2. tantivy returns its best ``k + EXTRA_CANDIDATES`` tools, best first by its score; they
   are rescored exactly, in that order, from the terms' ``bm25()`` contributions kept here
   (Python dicts, built with the index).
3. As soon as the ``k``-th best exact score beats tantivy's score of the next candidate, no
   tool from there on, returned or not, can enter the top ``k`` (its exact score is at most
   its tantivy score): the top ``k`` is FTS5's, certified. On benchmark queries this holds
   right after the first ``k`` (median 10 tools rescored for a top 10 at 1k and 10k tools).
   If the candidates run out first, tantivy is asked for four times as many.

Why this and not the alternatives (measured at 10k tools, same run, long benchmark queries,
README "Catalog: registration, list, BM25 search"): the pure-Python MaxScore index ranks in
~0.5 ms, ten times tantivy; tantivy ranking with its own BM25 and the columns as repeated
tokens kept FTS5's top 10 for only 14% of queries, and using it as is would lower nDCG@10 on
three of seven benchmark sources; rescoring its top 30 without the bound kept the top 10 for
98% of queries at 0.15 ms; the bound makes it exact, rescoring ~10 tools (~0.09 ms).

At a million tools tantivy's query over a long request's terms is most of a search (~4 ms):
once a revision has answered a few queries, a first stage in C takes its place (native.py:
every posting summed as 16-bit impacts rounded up, a filter as a bit mask over the tools;
the same certificate and rescoring, the same answers, a quarter of the time).

tantivy is an optional dependency (``pip install 'toolcat[fast]'``): a 17 MB compiled wheel
that needs Python 3.11 in its current release and pays off only in processes that search
many times; one-shot commands never build an index (engine.py, ``POSTINGS_AFTER``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import heapq
import itertools
import math
import sqlite3
import struct
import threading
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from ..store import reader
from ..store.connection import BUSY_TIMEOUT_MS
from . import native
from .fusion import Document
from .per_filter import PerFilter
from .postings import PostingsIndex, TermIndex

K1 = 1.2
B = 0.75
# Tools tantivy hands over for exact scoring, for a top ``k``: k plus this many (those not
# needed are not rescored), then four times as many each round until the top k is certified
# (or this many tools were asked for). 16: a second round is rare at 100k tools (2 of 300).
EXTRA_CANDIDATES = 16
MAX_CANDIDATES = 4096
# Column weights that are not multiples of the lightest: no bound, a fixed depth instead.
UNBOUNDED_CANDIDATES = 30
# tantivy scores in 32-bit floats: the bound is trusted up to this relative error.
SLACK = 1e-4
# Scoring one allowed tool exactly costs about this many of tantivy's candidates (a
# filtered query scores every allowed tool when that is cheaper than asking tantivy deep).
SCAN_COST = 3
COLUMNS = ("name", "hint", "description", "params", "tags")  # of tools_fts
# Every tools_fts row (row id, then COLUMNS), from FTS5's own copy of them read as the plain
# table it is: what a scan of the virtual table returns, in the same order, in half the
# time (1M rows: 1.7 against 3.6 s).
CONTENT = "SELECT id, c0, c1, c2, c3, c4 FROM tools_fts_content ORDER BY id"
FILLER = "\x01"  # pads tools' lengths in tantivy; our tokenizer never produces it
# Mean tokens per tool in tantivy after padding beyond which the bound is given up (the
# benchmark catalogs need ~190; a catalog of long texts with a few name-only tools more).
MAX_PADDED_LENGTH = 4000
# A column's tokens are repeated round(weight / the smallest weight) times, at most this.
MAX_REPEAT = 16
# Term queries kept per revision (agents repeat words); forgotten past this many.
QUERY_CACHE = 50_000
# A saved index is brought forward by the rows changed since it was saved (``apply``:
# each such row is scored apart at every query holding one of its terms) while those add up
# to at most one tool in this many, or ``FORWARD_MIN``; past that it is rebuilt whole.
FORWARD_SHARE = 50
FORWARD_MIN = 1000
# A filter's tools are scored one by one (``_scan``) instead of by the native first stage,
# which passes over the query's postings whatever the filter, while they cost less. Counted
# in postings (2.5-7 ns each, at 1M and 100k tools): an allowed tool scored costs about
# ``SCAN_POSTINGS`` (~8 us), one passed over (no query term) ``SCAN_PASS_POSTINGS``, the
# stage's own work ``NATIVE_OWN_POSTINGS`` and a posting for every
# ``NATIVE_TOOLS_A_POSTING`` tools (its marks). Both score the allowed tools that hold a
# query term (the stage up to ``k + EXTRA_CANDIDATES`` of them, in C: 0.35-1.5 us a tool,
# ``NATIVE_SCORE_POSTINGS``), as many as the terms' postings make likely. Fitted on long
# queries with random filters at 100k and 1M and on rare terms with small filters
# (attack45: costed as if every allowed tool were scored, those were scanned in 0.05-0.12
# ms against 0.004 ms masked): docs/benchmarks.md.
SCAN_POSTINGS = 3000
SCAN_PASS_POSTINGS = 500
NATIVE_OWN_POSTINGS = 1000
NATIVE_TOOLS_A_POSTING = 256
NATIVE_SCORE_POSTINGS = 200
# The native first stage leaves a long query's common terms out of its bounds (``best``'s
# ``spare_above``: candidates from the rarer terms, each scored with all of them, the
# answer certified against the spared terms' largest impacts, else asked again whole) in
# catalogs of ``SPARE_FROM`` tools or more, for terms more than ``SPARE_SHARE`` of the
# tools hold, when those hold ``SPARE_WHEN`` of the query's postings or more;
# ``SPARED_CANDIDATES`` candidates in one pass over the postings. Chosen on 300 bench
# queries at 10k, 100k and 1M tools (scripts/research/native_spare.py, docs/benchmarks.md):
# at 1M the stage's p50 1.04-1.31 -> 0.87-1.10 ms, 2-3 of 300 asked again; at 100k 0.13 ->
# 0.11; at 10k the p50 the same and the p99 doubled (0.21 -> 0.42 ms), so not there. More
# passes raised the p99, each one over the postings again: 26 candidates at first, then x4
# (three passes); 128, then 512 (the stage's p99 at 1M 4.1-6.3 ms in six runs against
# 3.5-4.3 with 256 at once, alternated: the queries asked again paid two spared passes).
# In one pass, sparing paid from a third of the postings on (``SPARE_WHEN`` 0.3 against
# 0.5 at 1M, on the bench's queries and on two other draws of 300: mean 0.94-1.03 against
# 1.03-1.09 ms, p99 2.9-3.2 against 3.3-3.7; at 100k within noise).
# Only for a top ``SPARE_MOST_K`` or shorter: the k-th score of a deeper one is lower, and
# bounds that add each spared term's largest impact certify it only after many more
# candidates, or not at all (asked again). On the 59 of those 300 queries spared, CPU
# against never sparing (attack46, with 26 candidates at first): k 10 0.78x at 100k,
# 0.76x at 1M; k 20 1.02x, 0.80x; k 30 1.37x, 0.92x; k 50 (hybrid's BM25 depth) 1.60x,
# 0.97x; k 100 1.90x, 1.36x.
SPARE_FROM = 50_000
SPARE_MOST_K = 20
SPARE_SHARE = 0.2
SPARE_WHEN = 0.3
SPARED_CANDIDATES = 256
# ... and when the spared terms' IDFs (each time asked) add up to at most this share of the
# largest IDF kept: the bounds add each spared term's largest impact (up to its IDF), and a
# k-th score that beats them from the kept terms' sums needs a rarer term than that. Queries
# spared from 30% of the postings on of a few common terms and middling ones (df 5-20%, no
# rare term: attack47) were not certified for a quarter of them, each paying a spared pass
# and a whole one: at 1M, 300 of them p90 2.7 -> 3.8 ms and p99 3.7 -> 5.3 against never
# sparing them (the code before 0.3); 0.5 left 256 of them spared, p90 2.9 and p99 3.8, and
# 92 of the bench's 93 spared queries (p50 / p99 within noise).
SPARED_IDF_MOST = 0.5
# Filters whose native masks (a bit a tool: 125 KB at 1M tools) are kept per revision.
NATIVE_MASKS = 16
# Rescored tools kept unpacked per revision (``TantivyIndex._decoded``), while tantivy's
# first stage answers (the native one scores in C): a warm query rescores ~11 tools,
# mostly ones earlier queries rescored, and reads its hits' terms again for fusion's
# signals. ~1.5 KB a tool; the oldest forgotten past this many.
DECODED_CACHE = 8192


@functools.cache
def tantivy_module() -> Any:
    """The ``tantivy`` module, or None where it is not installed (checked once)."""
    try:
        import tantivy
    except ImportError:
        return None
    return tantivy


def _body(times: Sequence[int], texts: Sequence[str]) -> str:
    """tantivy's one field: each column's tokens ``times`` over (repeated in C)."""
    return "".join(
        [(text + " ") * repeat for repeat, text in zip(times, texts, strict=True) if text]
    )


def lightest(weights: Sequence[float]) -> float:
    """The lightest positive column weight (1.0 when none is): tantivy's unit of count."""
    return min([w for w in weights if w > 0], default=1.0)


def repeats(weights: Sequence[float]) -> list[int]:
    """How often each column's tokens go into tantivy's one field: in proportion to the
    column's weight, the lightest positive column once."""
    unit = lightest(weights)
    return [min(MAX_REPEAT, max(1, round(w / unit))) if w > 0 else 0 for w in weights]


def count_scale(weights: Sequence[float]) -> float:
    """tantivy's term frequency over FTS5's weighted one: 1 over ``lightest``."""
    return 1 / lightest(weights)


# A tool packed: its length (``_LENGTH``), its term ids (``I``) and each term's count (``I``,
# or ``d`` when not whole), as bytes; ``TantivyIndex.build`` packs, ``_unpack`` reads.
_LENGTH = struct.Struct("I")
_COUNT_SIZE = {code: array(code).itemsize for code in ("I", "d")}


def _weighted(
    texts: list[str],
    weights: Sequence[float],
    times: Sequence[int],
    scale: float,
    integral: bool,
) -> tuple[int, dict[str, float], int]:
    """One ``tools_fts`` row's (FTS5's length: every token once; {term: weighted count as
    tantivy counts it, ``scale`` times FTS5's}; tantivy's tokens before padding)."""
    if integral:  # the repeated columns hold the weighted counts: count them in C
        # Each column split once and its words repeated as a list (the repeats share the
        # strings, already hashed): the tokens of ``_body`` in its order, a third less time.
        tokens: list[str] = []
        length = 0
        for repeat, text in zip(times, texts, strict=True):
            words = text.split()
            length += len(words)
            if repeat:
                tokens += words * repeat
        return length, cast(dict[str, float], Counter(tokens)), len(tokens)
    length = len(" ".join(texts).split())
    found: dict[str, float] = {}
    for weight, text in zip(weights, texts, strict=True):
        for token, n in Counter(text.split()).items():
            found[token] = found.get(token, 0.0) + weight * n * scale
    return length, found, sum(r * len(t.split()) for r, t in zip(times, texts, strict=True))


def _pack(length: int, found: dict[str, float], term_ids: Any, typecode: str) -> bytes:
    """A tool packed (``_unpack``): ``term_ids`` maps each term to its id (a defaultdict
    makes new ones)."""
    return (
        _LENGTH.pack(length)
        + array("I", map(term_ids.__getitem__, found)).tobytes()
        + array(typecode, found.values()).tobytes()
    )


def _row_bytes(row: tuple[Any, ...]) -> bytes:
    """One ``tools_fts`` row (row id and column texts) as ``content_digest`` hashes it."""
    return repr(row).encode("utf-8", "backslashreplace") + b"\n"


def content_digest(conn: sqlite3.Connection) -> str:
    """sha256 of what an index is built from: every ``tools_fts`` row as ``build`` reads
    it (call inside a read transaction)."""
    content = hashlib.sha256()
    for row in conn.execute(CONTENT):
        content.update(_row_bytes(row))
    return content.hexdigest()


def _unpack(blob: bytes, typecode: str) -> tuple[int, memoryview[int], memoryview[Any]]:
    """A packed tool's (length, term ids, counts), the last two read in place (no copies: a
    query unpacks ~20 tools)."""
    view = memoryview(blob)
    size = _COUNT_SIZE[typecode]
    n = (len(blob) - 4) // (4 + size)
    return (
        _LENGTH.unpack_from(blob)[0],
        view[4 : 4 + 4 * n].cast("I"),
        # n counts exactly: a saved tool of another length (a forged save) scores what it
        # holds instead of raising from every search
        view[4 + 4 * n : 4 + (4 + size) * n].cast(typecode),  # type: ignore[call-overload]
    )


class TantivyIndex(TermIndex):
    """tantivy's candidates, FTS5's exact ``bm25()`` scores; one catalog revision."""

    def __init__(self) -> None:
        super().__init__()
        # Row id -> the tool's terms packed (``_unpack``): its length, its term ids and each
        # term's weighted count (as tantivy counts it), from which a term's whole bm25()
        # contribution is computed when the tool is rescored. Packed, because Python dicts
        # of every tool's terms took 6 KB a tool (4.7 GB of RSS at 1M tools).
        self._tools: dict[int, bytes] = {}
        # Containers the size of the catalog hold no object the garbage collector tracks
        # (dicts of strings and numbers, tuples, arrays): a full collection in a serving
        # process does not walk them (a list of 1M row ids is ~1M visits a collection).
        self._term_ids: dict[str, int] = {}
        self._terms: tuple[str, ...] = ()  # term id -> term
        self._idf: array[float] = array("d")  # term id -> FTS5's IDF times (K1 + 1)
        self._counts = "I"  # array typecode of the counts: "d" when they are not integers
        self._scale = 1.0
        self._avgdl = 1.0
        # Every token of every column is a term of the packed tools (no column weighs 0):
        # fusion's signals can be read from them.
        self.holds_every_term = False
        self.bounded = False  # tantivy's scores bound FTS5's (weights are multiples)
        # Queries by tantivy rounds needed (0: uncertified; -1: every allowed tool scored).
        self.rounds: Counter[int] = Counter()
        # Queries whose common terms the native stage spared: certified, or asked again.
        self.spared: Counter[bool] = Counter()
        self.scored = 0  # tools the native stage scored exactly (tests, benchmarks)
        self._boost: dict[str, float] = {}  # term -> FTS5's IDF / tantivy's
        self._queries: dict[str, Any] = {}  # term -> tantivy term query
        self._row_ids: array[int] = array("q")  # doc id in the one segment -> row id
        # Row id -> (its length normalisation, {term id: weighted count}): ``_decode``.
        self._decoded: dict[int, tuple[float, dict[int, Any]]] = {}
        self._searcher: Any = None
        self._schema: Any = None
        # sha256 of the rows built from (``content_digest``): a later revision whose rows are
        # the same (a reindex changes vectors, not tools_fts) keeps the saved index.
        self.content = ""
        # Brought forward (``apply``): tantivy's documents stay as built, at the base
        # revision; rows changed since are scored from ``_tools`` instead. Term id -> how
        # many tools hold it now (``_df``) and in tantivy (``_tantivy_df``), tantivy's
        # document count and FTS5's average length when it was built, FTS5's token total now.
        self._df: array[int] = array("I")
        self._tantivy_df: array[int] = array("I")
        self._everyone = 0
        self._base_avgdl = 1.0
        self._length_total = 0
        self._stale: frozenset[int] = frozenset()  # rows whose tantivy document is not theirs
        self._delta_rows: frozenset[int] = frozenset()  # rows tantivy does not hold
        self._delta: dict[int, tuple[int, ...]] = {}  # term id -> delta rows holding it
        self._delta_most: dict[int, float] = {}  # term id -> its most to one of those rows
        # The first stage in C (native.py), built from ``_tools`` as they are at this
        # revision: it covers the rows brought forward and never the stale documents.
        self._impacts = native.Impacts()
        self._masks: PerFilter[bytes] = PerFilter(NATIVE_MASKS)  # its masks of filters
        # The change log's mark of ``revision`` (``reader.fts_history``) in the catalog it
        # was made from: it is brought forward in memory only along that history.
        self.history: int | None = None

    def build(
        self,
        conn: sqlite3.Connection,
        revision: int,
        weights: Sequence[float],
        directory: Path | None = None,
    ) -> None:
        """Rebuild from ``tools_fts`` (call inside the read transaction of ``revision``);
        tantivy's part in ``directory`` when given (to be saved), else in memory."""
        tantivy = tantivy_module()
        weights = tuple(weights)
        times = repeats(weights)
        unit, scale = lightest(weights), count_scale(weights)
        bounded = all(abs(r * unit - w) < 1e-9 for r, w in zip(times, weights, strict=True))
        counted_in_body = bounded  # counts from the repeated columns (weight 0: left out)
        # Two passes over the rows (one read transaction: the same rows), none held whole.
        lengths: list[int] = []  # FTS5's: every token once
        repeated: list[int] = []  # tantivy's before padding
        packed: dict[int, bytes] = {}
        names: dict[int, str] = {}
        typecode = "I" if bounded else "d"
        content = hashlib.sha256()
        term_ids: dict[str, int]
        df: array[int]
        counter = native.term_counts() if bounded else None
        if counter is not None:  # the same counts and bytes as below, a fifth of the time
            add = counter.add
            for row in conn.execute(CONTENT):
                texts = [text or "" for text in row[1:]]
                packed[row[0]], length, tokens_in = add(texts, times)
                lengths.append(length)
                repeated.append(tokens_in)
                names[row[0]] = texts[0]
            term_ids, df = counter.term_ids, array("I")
            df.frombytes(counter.doc_freq())
            del counter
        else:
            term_ids, df = self._count_terms(
                conn, weights, times, scale, bounded, lengths, repeated, packed, names
            )
        n_docs = len(lengths)
        avgdl = (sum(lengths) / n_docs) if n_docs else 1.0
        # tantivy's length normalisation must be ``scale`` times FTS5's: a tool's length
        # over tantivy's average must be ``offset + scale * length / avgdl``.
        offset = (scale - 1) * (1 - B) / B
        wanted = [offset + scale * n / avgdl for n in lengths]
        per_unit = math.ceil(
            max([r / w for r, w in zip(repeated, wanted, strict=True) if w], default=1.0)
        )
        per_unit = max(per_unit, 1)
        if per_unit * (offset + scale) > MAX_PADDED_LENGTH:
            bounded = False  # padding would cost more than it saves: a fixed depth instead
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("id", stored=False, indexed=False, fast=True)
        builder.add_text_field(
            "body", stored=False, tokenizer_name="whitespace", index_option="freq"
        )
        index = (
            tantivy.Index(builder.build())
            if directory is None
            else tantivy.Index(builder.build(), path=str(directory))
        )
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        total = 0
        row_ids: list[int] = []
        for row, tokens_in, want in zip(conn.execute(CONTENT), repeated, wanted, strict=True):
            content.update(_row_bytes(row))
            body = _body(times, [text or "" for text in row[1:]])
            padded = max(tokens_in, math.floor(per_unit * want + 1e-9)) if bounded else tokens_in
            if padded > tokens_in:
                body += (FILLER + " ") * (padded - tokens_in)
            total += padded
            writer.add_document(tantivy.Document(id=row[0], body=body))
            row_ids.append(row[0])
        del repeated, wanted
        if bounded:
            # Empty documents bring tantivy's average length up to ``per_unit`` (not past):
            # one, added again and again (tantivy copies it), a third less time than new ones.
            empty = tantivy.Document(id=-1)
            for _ in range(max(0, total // per_unit - n_docs)):
                writer.add_document(empty)
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        searcher = index.searcher()
        terms = tuple(term_ids)  # in id order
        self._tools, self._term_ids, self._terms = packed, term_ids, terms
        self._counts, self._scale, self._avgdl = typecode, scale, avgdl
        self._df = df
        self._tantivy_df, self._everyone = self._df, searcher.num_docs
        self._base_avgdl, self._length_total = avgdl, sum(lengths)
        self._stale, self._delta_rows, self._delta = frozenset(), frozenset(), {}
        self.n_docs = n_docs
        self._weigh()
        self.names = names
        self.holds_every_term = all(times) or not counted_in_body
        self.bounded, self._queries = bounded, {}
        self._decoded = {}
        # One writer thread and one commit make one segment with documents in the order
        # they were added; anything else is mapped through the "id" fast field.
        self._row_ids = array("q", row_ids if searcher.num_segments == 1 else [])
        self._searcher, self._schema = searcher, index.schema
        if bounded and not self._bound_holds():
            self.bounded = False  # a tantivy that scores otherwise: a fixed depth instead
        self.revision, self.weights = revision, weights
        self.history = reader.fts_history(conn, revision)
        self.content = content.hexdigest()

    @staticmethod
    def _count_terms(
        conn: sqlite3.Connection,
        weights: Sequence[float],
        times: Sequence[int],
        scale: float,
        integral: bool,
        lengths: list[int],
        repeated: list[int],
        packed: dict[int, bytes],
        names: dict[int, str],
    ) -> tuple[dict[str, int], array[int]]:
        """``build``'s first pass in Python (``_impacts.TermCounts`` where it is compiled
        and the weights are whole multiples): each row's lengths, packed terms and name
        appended to the lists and dicts given; returns the term ids and their tool counts."""
        doc_freq: Counter[str] = Counter()
        # Term ids in first-seen order, a new term's made in C: no Python call a term
        term_ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        typecode = "I" if integral else "d"
        count_terms = doc_freq.update
        for row in conn.execute(CONTENT):
            texts = [text or "" for text in row[1:]]
            length, found, tokens_in = _weighted(texts, weights, times, scale, integral)
            lengths.append(length)
            repeated.append(tokens_in)
            count_terms(found.keys())
            packed[row[0]] = _pack(length, found, term_ids, typecode)
            names[row[0]] = texts[0]
        ids = dict(term_ids)  # a plain dict: a lookup of an unknown term adds nothing
        return ids, array("I", map(doc_freq.__getitem__, ids))

    def _weigh(self) -> None:
        """FTS5's IDFs and the boosts of tantivy's term queries from the term counts.

        A term query's boost is FTS5's IDF over tantivy's (which counts the documents
        tantivy holds), times how much FTS5's length normalisation may have fallen below
        tantivy's since it was built: with an average length ``a`` then and ``a'`` now,
        ``f / (f + K(a'))`` is at most ``max(1, a' / a)`` times ``f / (f + K(a))``. So
        tantivy's score stays an upper bound of FTS5's (exactly ``build``'s when nothing
        changed) and the certificate holds for an index brought forward."""
        n_docs, everyone = self.n_docs, self._everyone
        self._avgdl = (self._length_total / n_docs) if n_docs else 1.0
        margin = max(1.0, self._avgdl / self._base_avgdl)
        idf = array("d")
        boost: dict[str, float] = {}
        for term, df, held in zip(self._terms, self._df, self._tantivy_df, strict=True):
            value = math.log((n_docs - df + 0.5) / (df + 0.5))
            value = value if value > 0 else 1e-6
            bound = value / math.log(1 + (everyone - held + 0.5) / (held + 0.5))
            boost[term] = bound * margin if margin > 1.0 else bound
            idf.append(value * (K1 + 1))
        self._idf, self._boost = idf, boost
        self.doc_freq = {term: df for term, df in zip(self._terms, self._df, strict=True) if df}

    def _index_delta(self) -> None:
        """Term id -> the rows tantivy does not hold (brought forward) that hold it, and
        the most any of them gets from that term (``_held_apart`` prunes by it). Call after
        ``_weigh``."""
        delta: defaultdict[int, list[int]] = defaultdict(list)
        most: dict[int, float] = {}
        n_terms, idf = len(self._terms), self._idf
        for row in self._delta_rows:
            norm, held = self._decode(row, keep=False)
            for term_id, f in held.items():
                if not 0 <= term_id < n_terms:
                    raise ValueError(f"row {row} holds term {term_id} of {n_terms}")
                delta[term_id].append(row)
                contribution = idf[term_id] * f / (f + norm)  # as ``_score`` adds it
                if contribution > most.get(term_id, -1.0):
                    most[term_id] = contribution
        self._delta = {term_id: tuple(rows) for term_id, rows in delta.items()}
        self._delta_most = most

    def _held_apart(
        self,
        best: list[tuple[float, int]],
        term_ids: list[int],
        k: int,
        allowed: frozenset[int] | None,
    ) -> None:
        """Add to ``best`` (a heap of the k best exact (score, -row id) among tantivy's
        documents) the rows tantivy does not hold that can enter it (MaxScore): a row whose
        query terms are only ones whose most, added up, falls below the k-th score is not
        scored (a common term of many changed rows costs nothing then)."""
        most = self._delta_most
        # A term asked twice adds its contribution twice (``_score``): its most as often.
        asked = Counter(term_ids)
        terms = sorted((most[t] * n, t) for t, n in asked.items() if t in self._delta)
        floor = best[0][0] if len(best) == k else -1.0
        below, first = 0.0, 0
        for i, (bound, _) in enumerate(terms):
            if (below + bound) * (1 + SLACK) >= floor:
                break
            below, first = below + bound, i + 1
        apart = {doc for _, t in terms[first:] for doc in self._delta[t]}
        if allowed is not None:
            apart &= allowed
        for doc in apart:
            entry = (self._score(doc, term_ids), -doc)
            if len(best) < k:
                heapq.heappush(best, entry)
            elif entry > best[0]:
                heapq.heapreplace(best, entry)

    def apply(
        self, conn: sqlite3.Connection, revision: int, changed: Iterable[int]
    ) -> TantivyIndex:
        """A new index at ``revision``: this one with the ``tools_fts`` rows in ``changed``
        (inserted, deleted or both since this index's revision: ``reader.fts_changes``)
        taken out and, where they are now, read again (call inside ``revision``'s read
        transaction). tantivy's documents stay as built: a changed row's is passed over
        (``_stale``) and the rows read here are scored from their terms (``_delta``);
        IDFs, the average length and the boosts are FTS5's at ``revision`` (``_weigh``), so
        the scores and the ranking are exactly a new build's. This index is left as it is
        (queries may be using it).

        Raises:
            ValueError: tantivy's documents are not mapped to rows (several segments),
                its scores do not bound FTS5's (``bounded`` False), or this index's counts
                do not add up (a forged save).
        """
        if not self._row_ids:
            raise ValueError("tantivy's documents are not mapped to rows")
        if not self.bounded:
            # A fixed depth of tantivy's best is rescored: best effort, so the answer rests
            # on tantivy's own ranking, which the save's statistics and the documents passed
            # over would make differ from a new build's.
            raise ValueError("tantivy's scores do not bound FTS5's")
        tools, names = dict(self._tools), dict(self.names)
        terms, term_ids = list(self._terms), dict(self._term_ids)
        df, tantivy_df = array("I", self._df), array("I", self._tantivy_df)
        delta_rows, stale = set(self._delta_rows), set(self._stale)
        length_total = self._length_total
        changed = sorted(set(changed))
        for row in changed:
            blob = tools.pop(row, None)
            if blob is None:
                continue
            del names[row]
            length, held_ids, _ = _unpack(blob, self._counts)
            length_total -= length
            for term_id in held_ids:
                df[term_id] -= 1  # below 0 (a forged save): OverflowError, a ValueError
            if row in delta_rows:
                delta_rows.discard(row)
            else:
                stale.add(row)
        times = repeats(self.weights)
        integral = self._counts == "I"
        select = f"SELECT rowid, {', '.join(COLUMNS)} FROM tools_fts WHERE rowid IN "
        for at in range(0, len(changed), 500):
            chunk = changed[at : at + 500]
            for row in conn.execute(select + f"({', '.join('?' * len(chunk))})", chunk):
                texts = [text or "" for text in row[1:]]
                length, found, _ = _weighted(texts, self.weights, times, self._scale, integral)
                for term in found:
                    if term not in term_ids:
                        term_ids[term] = len(terms)
                        terms.append(term)
                        df.append(0)
                        tantivy_df.append(0)
                    df[term_ids[term]] += 1
                tools[row[0]] = _pack(length, found, term_ids, self._counts)
                names[row[0]] = texts[0]
                delta_rows.add(row[0])
                length_total += length
        new = TantivyIndex()
        new._tools, new.names, new._terms, new._term_ids = tools, names, tuple(terms), term_ids
        new._df, new._tantivy_df, new._length_total = df, tantivy_df, length_total
        new._everyone, new._base_avgdl = self._everyone, self._base_avgdl
        new._stale, new._delta_rows = frozenset(stale), frozenset(delta_rows)
        new._counts, new._scale = self._counts, self._scale
        new.holds_every_term, new.bounded = self.holds_every_term, self.bounded
        new._row_ids, new._searcher, new._schema = self._row_ids, self._searcher, self._schema
        new.n_docs = len(tools)
        new._weigh()
        new._index_delta()
        new.revision, new.weights = revision, self.weights
        new.history = reader.fts_history(conn, revision)
        return new

    def forward_tools(
        self, saved: dict[str, Any], changed: Iterable[int]
    ) -> list[bytes | memoryview]:
        """The packed tools of this index, brought forward (``apply``) by ``changed`` from
        the ``saved`` state, in ``state``'s order: pieces of the saved bytes (not copied)
        and the rows read again (``lexical_file.save`` writes them as they are; joining a
        million small ones took 1.8 s at 1M tools)."""
        gone = frozenset(changed)
        pieces: list[bytes | memoryview] = []
        blob, start, at, kept = memoryview(saved["tools"]), 0, 0, 0
        for row, size in zip(saved["rows"], saved["sizes"], strict=True):
            if row in gone:
                pieces.append(blob[start:at])
                start = at + size
            else:
                kept += 1
            at += size
        pieces.append(blob[start:at])
        # then the rows read again, appended after the kept ones
        pieces.extend(itertools.islice(self._tools.values(), kept, None))
        return pieces

    def state(self, tools: list[bytes | memoryview] | None = None) -> dict[str, Any]:
        """What ``restore`` needs besides tantivy's folder (``lexical_file.save``). Rows
        come as tantivy holds them (in ``positions`` order, less the stale ones), then the
        rows it does not hold: ``_tools`` keeps that order (``apply`` appends). ``tools``:
        the packed tools joined, when the caller has them (``forward_tools``)."""
        rows = list(self._tools)
        return {
            "terms": self._terms,
            "doc_freq": self._df,
            "names": [self.names[row] for row in rows],
            "rows": rows,
            "sizes": [len(self._tools[row]) for row in rows],
            "tools": b"".join(self._tools.values()) if tools is None else tools,
            "positions": self._row_ids,
            "tantivy_df": self._tantivy_df,
            "stale": sorted(self._stale),
            "content": self.content,
            "meta": {
                "n_docs": self.n_docs,
                "counts": self._counts,
                "scale": self._scale,
                "avgdl": self._avgdl,
                "base_avgdl": self._base_avgdl,
                "length_total": self._length_total,
                "delta": len(self._delta_rows),
                "bounded": self.bounded,
                "holds_every_term": self.holds_every_term,
            },
        }

    def restore(
        self,
        revision: int,
        weights: Sequence[float],
        directory: Path,
        state: dict[str, Any],
    ) -> None:
        """Take up an index ``state()`` saved at ``revision`` with tantivy's folder."""
        tantivy = tantivy_module()
        meta = state["meta"]
        index = tantivy.Index.open(str(directory))
        searcher = index.searcher()
        terms: tuple[str, ...] = tuple(state["terms"])
        blob, tools, at = state["tools"], {}, 0
        rows = state["rows"]
        for row, size in zip(rows, state["sizes"], strict=True):
            tools[row] = blob[at : at + size]
            at += size
        if len(tools) != len(rows):
            # a row saved twice: tantivy's two documents of it answered it twice
            raise ValueError("a row saved twice")
        self._tools, self._terms = tools, terms
        self._term_ids = {term: i for i, term in enumerate(terms)}
        if meta["scale"] != count_scale(weights):
            # Every length normalisation is multiplied by it: a forged one scored every tool
            # wrong, and one that rounds a normalisation to 0 divided a count of 0 by 0.
            raise ValueError("saved with another scale of counts than these weights give")
        self._counts, self._scale = meta["counts"], meta["scale"]
        self._df, self._tantivy_df = array("I", state["doc_freq"]), array("I", state["tantivy_df"])
        self._everyone, self._base_avgdl = searcher.num_docs, meta["base_avgdl"]
        self._length_total, self.n_docs = meta["length_total"], int(meta["n_docs"])
        self._weigh()  # as ``build`` computes them
        self.names = dict(zip(rows, state["names"], strict=True))
        self.holds_every_term, self.bounded = meta["holds_every_term"], meta["bounded"]
        self._queries, self._decoded = {}, {}
        positions = array("q", state["positions"])
        self._row_ids = positions if searcher.num_segments == 1 else array("q")
        if len(self._row_ids) > searcher.num_docs:
            raise ValueError("more rows mapped than tantivy holds documents")
        self._stale = frozenset(state["stale"])
        self._delta_rows = frozenset(rows[len(rows) - meta["delta"] :] if meta["delta"] else ())
        if (self._stale or self._delta_rows) and not self._row_ids:
            raise ValueError("brought forward, but tantivy's documents are not mapped to rows")
        self._index_delta()
        self._searcher, self._schema = searcher, index.schema
        if self.bounded and not self._bound_holds():
            # tantivy's folder is input too: one of another catalog's documents answered
            # with bounds of nothing this index holds (answers not FTS5's), as a build checks
            raise ValueError("tantivy's saved scores do not bound the saved tools'")
        self.revision, self.weights = revision, tuple(weights)

    def _decode(self, doc: int, keep: bool = True) -> tuple[float, dict[int, Any]]:
        """Tool ``doc``'s length normalisation (``K1 (1 - B + B len / avgdl)`` times
        ``scale``: tantivy's counts are ``scale`` times FTS5's) and its {term id: count},
        unpacked once and, with ``keep``, kept (``DECODED_CACHE``)."""
        decoded = self._decoded.get(doc)
        if decoded is None:
            length, held_ids, counts = _unpack(self._tools[doc], self._counts)
            norm = self._scale * K1 * (1 - B + B * length / self._avgdl)
            if self._counts == "d" and not all(0.0 <= c < math.inf for c in counts):
                # a forged save: -norm divided by 0; another count counts nothing
                counts = [c if 0.0 <= c < math.inf else 0.0 for c in counts]  # type: ignore[assignment]
            held = dict(zip(held_ids, counts, strict=True))
            if len(held) < len(held_ids):  # a forged save repeats a term: its first count
                held = {}
                for term_id, count in zip(held_ids, counts, strict=True):
                    held.setdefault(term_id, count)
            decoded = (norm, held)
            if keep:
                kept = self._decoded
                while len(kept) >= DECODED_CACHE:
                    # The oldest one, not all at once: freeing 8k tools took ~5 ms of one
                    # query (its p99). A server's readers share the index: another may
                    # have taken it out already (and kept its own: then the next one).
                    with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                        del kept[next(iter(kept))]
                kept[doc] = decoded
        return decoded

    def _score(self, doc: int, ids: Sequence[int], keep: bool = True) -> float:
        """Tool ``doc``'s bm25() for these term ids: each term's whole contribution (IDF
        times the saturated, length-normalised weighted count) summed in the query's term
        order, as FTS5 sums (a term the tool lacks adds nothing): tools that tie in FTS5 tie
        here, bit for bit, and keep the lower row id first."""
        norm, held = self._decode(doc, keep)
        idf = self._idf
        # f / (f + norm) with f = FTS5's weighted count, from tantivy's (scale * f). Added
        # left to right as FTS5 and the native stage add (``Index.best``), not by ``sum``:
        # from Python 3.12 it adds floats with compensation, an ulp from theirs.
        score = 0.0
        for t in ids:
            if t in held:
                f = held[t]
                score += idf[t] * f / (f + norm)
        return score

    def contribution(self, doc: int, term: str, keep: bool = True) -> float:
        """``term``'s bm25() contribution to tool ``doc`` (0.0 when it lacks the term);
        ``keep``: as ``_decode``'s."""
        term_id = self._term_ids.get(term)
        if doc not in self._tools or term_id is None:
            return 0.0
        return self._score(doc, [term_id], keep)

    def _ids(self, terms: Sequence[str]) -> list[int]:
        """Term ids of index terms (-1 for a term no tool has)."""
        get = self._term_ids.get
        return [get(term, -1) for term in terms]

    def _bound_holds(self, terms: int = 24, hits: int = 20) -> bool:
        """Whether tantivy's score bounds FTS5's on a sample (one-term queries over a few
        terms of the first tools): the certificate rests on tantivy's BM25 details (its
        length codes, averages, constants), checked here for the tantivy installed."""
        tantivy = tantivy_module()
        row_of = self._row_ids
        for term in itertools.islice(self.doc_freq, terms):
            query = tantivy.Query.boost_query(
                tantivy.Query.term_query(self._schema, "body", term), self._boost[term]
            )
            found = self._searcher.search(query, hits, count=False).hits
            if row_of and any(a.doc >= len(row_of) for _, a in found):
                return False  # a document past the rows (tantivy's padding holds no term)
            ids = (
                [row_of[a.doc] for _, a in found]
                if row_of
                else self._searcher.fast_field_values("id", [a for _, a in found])
            )
            for (score, _), doc in zip(found, ids, strict=True):
                if doc in self._stale:
                    continue  # its document is of the row as it was (brought forward)
                if doc not in self._tools:
                    return False  # a document of no row held (tantivy's padding holds none)
                if score * (1 + SLACK) < self.contribution(doc, term, keep=False):
                    return False  # (not kept: a restore's index starts with none decoded)
        return True

    def documents(self, ids: Sequence[int], terms: Sequence[str]) -> dict[int, Document] | None:
        """fusion's ``Document`` of each of these tools the index holds (None when the
        index does not hold every term: a column weighing 0)."""
        if not self.holds_every_term:
            return None
        names = self.names
        impacts = self._impacts.index
        if impacts is not None:  # read in C, without unpacking each tool in Python
            held_by = impacts.held(self._ids(terms), ids, terms)
            return {
                doc: (names[doc], held)
                for doc, held in zip(ids, held_by, strict=True)
                if held is not None
            }
        wanted = [(i, term) for i, term in zip(self._ids(terms), terms, strict=True) if i >= 0]
        tools, decode = self._tools, self._decode
        found: dict[int, Document] = {}
        for doc in ids:
            if doc in tools:
                held = decode(doc, keep=False)[1]
                found[doc] = (names[doc], {term for i, term in wanted if i in held})
        return found

    def rank(
        self, terms: Sequence[str], k: int, allowed: frozenset[int] | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` best (row id, score) for index terms (as ``terms`` returns them); with
        ``allowed`` (``reader.allowed_ids``), among those tools only."""
        if k < 1 or not terms or (allowed is not None and not allowed):
            return []  # (the certificates below read the k-th best: none at k 0)
        if allowed is None or not self.scans(terms, allowed, k):
            impacts = self._impacts.ready(self._impacts_source)
            if impacts is not None:
                return self._rank_by_impacts(impacts, terms, k, allowed)
        bounded = self.bounded
        depth = k + EXTRA_CANDIDATES if bounded else max(k, UNBOUNDED_CANDIDATES)
        if allowed is not None:
            # tantivy knows nothing of the filter: ask deep enough that k allowed tools are
            # likely among its candidates, unless scoring every allowed tool costs less.
            if not bounded or len(allowed) * SCAN_COST <= self.n_docs * depth / len(allowed):
                return self._scan(terms, k, allowed)
            depth = min(MAX_CANDIDATES, math.ceil(depth * self.n_docs / len(allowed)))
        tantivy = tantivy_module()
        should = tantivy.Occur.Should
        queries = self._queries
        if len(queries) > QUERY_CACHE:
            queries.clear()
        clauses = []
        for term in terms:
            query = queries.get(term)
            if query is None:
                query = tantivy.Query.term_query(self._schema, "body", term)
                query = queries[term] = tantivy.Query.boost_query(query, self._boost[term])
            clauses.append((should, query))
        query = tantivy.Query.boolean_query(clauses)
        term_ids = self._ids(terms)
        # Brought forward (``apply``): tantivy's stale documents are passed over below, and
        # the rows it does not hold are added after (``_held_apart``).
        stale = self._stale
        # Stale documents take candidates a new build would give to live ones: as many more.
        most = MAX_CANDIDATES + len(stale)
        rounds = 0
        while True:
            rounds += 1
            hits = self._searcher.search(query, depth, count=False).hits
            if self._row_ids:
                row_ids, mapped = self._row_ids, len(self._row_ids)
                # Converted as the loop below reaches them: it stops at the certificate. A
                # document past the rows (a saved tantivy folder is input) is passed over.
                found: Iterable[tuple[float, int]] = (
                    (score, row_ids[address.doc]) for score, address in hits if address.doc < mapped
                )
            else:
                ids = self._searcher.fast_field_values("id", [a for _, a in hits])
                tools = self._tools  # an id of no row held (a saved folder's): passed over
                found = [
                    (score, doc) for (score, _), doc in zip(hits, ids, strict=True) if doc in tools
                ]
            best, certified = self._best(found, term_ids, k, bounded, allowed, stale)
            certified = certified or len(hits) < depth  # every matching tool is among them
            if certified or (bounded and len(best) == k and best[0][0] > hits[-1][0] * (1 + SLACK)):
                break
            if not bounded or depth >= most:
                if allowed is not None:  # few allowed tools match: score them all instead
                    return self._scan(terms, k, allowed)
                rounds = 0  # best effort, not certified
                break
            depth = min(depth * 4, most)
        self.rounds[rounds] += 1
        if self._delta:
            self._held_apart(best, term_ids, k, allowed)
        return [(-doc, score) for score, doc in sorted(best, reverse=True)]

    def _rank_by_impacts(
        self, impacts: Any, terms: Sequence[str], k: int, allowed: frozenset[int] | None
    ) -> list[tuple[int, float]]:
        """``rank`` by the native first stage (native.py: ``Index.best``, candidates and
        exact scores in C): every current row is among its candidates (none stale, none
        held apart), only allowed ones with a filter, and its bounds hold whatever the
        column weights, so the answer is certified unless over ``MAX_CANDIDATES`` tools tie
        with the k-th (as tantivy's stage, it then answers from those scored: the best
        bounds, lower row ids first). With common terms spared (``_spare_above``) and the
        answer not certified, asked again with every term."""
        term_ids = self._ids(terms)
        mask = None if allowed is None else self._masks.get(allowed, impacts.mask)
        depth = k + EXTRA_CANDIDATES
        spare_above = self._spare_above(term_ids, k)
        if spare_above >= 0:
            # Their largest impacts added to every bound, deeper candidates are needed more
            # often: many in one pass over the postings (candidates are scored only until
            # certified; not certified, asked again whole).
            many = max(SPARED_CANDIDATES, depth)
            found, rounds, scored = impacts.best(term_ids, k, many, many, SLACK, spare_above, mask)
            self.scored += scored
            self.spared[bool(rounds)] += 1
            if rounds:
                self.rounds[rounds] += 1
                return found  # type: ignore[no-any-return]
        found, rounds, scored = impacts.best(term_ids, k, depth, MAX_CANDIDATES, SLACK, -1, mask)
        self.scored += scored
        self.rounds[rounds] += 1
        return found  # type: ignore[no-any-return]

    def _spare_above(self, term_ids: list[int], k: int) -> int:
        """The document frequency above which the native stage leaves a query's terms out
        of its bounds for a top ``k`` (``SPARE_SHARE``), or -1 when none is worth it."""
        n_docs = self.n_docs
        if n_docs < SPARE_FROM or k > SPARE_MOST_K:
            return -1
        above = int(n_docs * SPARE_SHARE)
        df = self._df
        held = [i for i in term_ids if i >= 0 and df[i]]
        common = [df[i] for i in held if df[i] > above]
        if not common or sum(common) < SPARE_WHEN * sum([df[i] for i in held]):
            return -1
        # As ``best`` spares them: every term held by more than ``above`` tools but the
        # rarest held one (the first of the rarest, with its repeats); none left, no pass
        # of ``SPARED_CANDIDATES`` for nothing.
        rarest = min(held, key=df.__getitem__)
        idf = self._idf
        spared = [idf[i] for i in held if df[i] > above and i != rarest]
        kept = [idf[i] for i in held if df[i] <= above or i == rarest]
        return above if spared and sum(spared) <= SPARED_IDF_MOST * max(kept) else -1

    def _impacts_source(self) -> tuple[Any, ...]:
        """The native stage's ``_impacts.Index`` arguments, from this revision's tools."""
        return (self._tools, self._counts, self._idf, self._scale, K1, B, self._avgdl)

    def wait_native(self, timeout: float | None = None) -> Any:
        """Build the native first stage now if not started, and wait for it: the built
        ``_impacts.Index``, or None (tests, benchmarks)."""
        return self._impacts.wait(self._impacts_source, timeout)

    def _best(
        self,
        found: Iterable[tuple[float, int]],
        term_ids: list[int],
        k: int,
        bounded: bool,
        allowed: frozenset[int] | None,
        stale: frozenset[int],
    ) -> tuple[list[tuple[float, int]], bool]:
        """The k best exact (score, -row id) of tantivy's candidates given best bound
        first, as a heap, and whether the certificate held: the k-th exact score beat a
        bound."""
        score = self._score
        best: list[tuple[float, int]] = []
        for bound, doc in found:
            # The bounds come best first and bound the exact scores from above: once the
            # k-th exact score beats this one, no tool from here on can enter.
            if bounded and len(best) == k and best[0][0] > bound * (1 + SLACK):
                return best, True
            if (allowed is not None and doc not in allowed) or (stale and doc in stale):
                continue
            # Summed in the query's term order (``_score``; a set's order made tools
            # that tie in FTS5 differ by an ulp).
            entry = (score(doc, term_ids), -doc)
            if len(best) < k:
                heapq.heappush(best, entry)
            elif entry > best[0]:
                heapq.heapreplace(best, entry)
        return best, False

    def scans(self, terms: Sequence[str], allowed: frozenset[int], k: int = 10) -> bool:
        """Whether scoring ``allowed`` tool by tool costs less than the native first stage
        over these terms' postings, for a top ``k`` (``SCAN_POSTINGS``)."""
        df = self._df
        postings = sum([df[i] for i in self._ids(terms) if i >= 0])
        n_docs = self.n_docs
        # the allowed tools holding a query term, as many as the postings make likely
        holding = len(allowed) * min(1.0, postings / n_docs) if n_docs else 0.0
        scanned = len(allowed) * SCAN_PASS_POSTINGS + holding * SCAN_POSTINGS
        rescored = min(holding, k + EXTRA_CANDIDATES) * NATIVE_SCORE_POSTINGS
        own = NATIVE_OWN_POSTINGS + n_docs // NATIVE_TOOLS_A_POSTING
        return scanned < own + postings + rescored

    def _scan(
        self, terms: Sequence[str], k: int, allowed: frozenset[int]
    ) -> list[tuple[int, float]]:
        """Every allowed tool that has a query term, scored exactly: the ``k`` best."""
        ids = self._ids(terms)
        wanted = frozenset(ids)
        tools, typecode = self._tools, self._counts
        scored: list[tuple[float, int]] = []
        for doc in allowed:
            blob = tools.get(doc)
            if blob is not None and not wanted.isdisjoint(_unpack(blob, typecode)[1]):
                # as ``rank`` sums; not kept: a scan would push out the tools queries share
                scored.append((self._score(doc, ids, keep=False), -doc))
        self.rounds[-1] += 1
        return [(-doc, score) for score, doc in heapq.nlargest(k, scored)]


class LexicalIndex:
    """The in-memory BM25 index of one engine: tantivy's where the ``tantivy`` package is
    importable, else the pure-Python postings (same scores). Nothing is imported before the
    first build, so a process that never builds one never loads tantivy.

    ``build_soon`` builds on a thread of its own, from its own read-only connection, so the
    query that asks for it (and those after it, until the index is ready) is answered by
    FTS5 instead of waiting seconds for a large catalog's build. The new index is stamped
    with the revision that connection read at, and served only to queries at that revision.
    """

    def __init__(self, backend: str | None = None) -> None:
        self.backend = backend  # "tantivy", "postings", or None: tantivy when importable
        self.index: TantivyIndex | PostingsIndex | None = None
        self.error = ""  # why tantivy was given up, if it was
        self._builder: threading.Thread | None = None
        # Engines that share one index (a server's pooled readers: ``Catalog.share_indexes``)
        # may ask for a build at once: one of them starts it.
        self._starting = threading.Lock()
        self._again = False  # asked while a build ran: build once more after it
        # The revision at which the file was replaced by another copy (``forgotten``): the
        # save beside it at that revision may be the replaced copy's, taken up only if it
        # was built from this copy's rows (its content digest, a read of every row).
        self._distrusted: int | None = None
        # Set on the index a copy found damaged was served from, once that copy is replaced
        # (``forgotten``): what it makes from then on (from the damaged copy, perhaps) is
        # never served nor saved; it serves readers on their way out with what it holds.
        # ``_saves_for``: the index whose flag fences this one (a background build's index
        # made apart).
        self._replaced = False
        self._saves_for: LexicalIndex | None = None
        self._saver: threading.Thread | None = None  # ``_save_soon``'s
        self._saving = False  # ``_saver`` saves (until it says otherwise under ``_starting``)
        self._save_again = False  # brought forward while a save ran: save once more after it

    @property
    def revision(self) -> int:
        return self.index.revision if self.index is not None else -1

    @property
    def doc_freq(self) -> dict[str, int]:
        """How many tools hold each indexed term, at ``revision``."""
        return self.index.doc_freq if self.index is not None else {}

    def current(self, revision: int, weights: Sequence[float]) -> bool:
        return self.at(revision, weights) is not None

    def at(self, revision: int, weights: Sequence[float]) -> TantivyIndex | PostingsIndex | None:
        """The index if it was built at ``revision`` with ``weights``, else None. A query
        keeps the object it got: a background build that finishes meanwhile replaces
        ``self.index``, not the index the query is using."""
        index = self.index
        return index if index is not None and index.current(revision, weights) else None

    def forgotten(self, revision: int) -> LexicalIndex:
        """A new one, holding nothing, for the readers of the copy at ``revision`` that
        replaced one found damaged: what this one holds, or loads, builds or brings forward
        from now on (readers of the old copy still under way share it), may come from the
        damaged copy, at any revision. A save beside the file at ``revision`` is taken up
        only if built from the new copy's rows (``_distrusted``). A build of its own under
        way is served to no one (nor started again: this one only serves readers on their
        way out)."""
        with self._starting:
            self._replaced = True
        fresh = LexicalIndex(self.backend)
        fresh._distrusted = revision
        return fresh

    @property
    def _fenced(self) -> bool:
        """Whether what this one makes may not be saved (``_replaced``)."""
        return (self._saves_for or self)._replaced

    @property
    def building(self) -> bool:
        """Whether a background build is running."""
        return self._builder is not None and self._builder.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a background build to finish (tests, benchmarks)."""
        builder = self._builder
        if builder is not None:
            builder.join(timeout)

    def build_soon(
        self, conn: sqlite3.Connection, revision: int, weights: Sequence[float], path: str
    ) -> None:
        """Build on a background thread from the catalog file at ``path`` (read through a
        connection of its own); nothing when a build is already running. Without a file
        (``path`` empty) the build runs here, inside ``conn``'s read transaction."""
        if not path:
            self.build(conn, revision, weights)
            return
        with self._starting:
            if self.at(revision, weights) is not None:
                return  # built by the build that just ended (asked as it ended): served
            if self.building:
                # asked at a newer revision than the build under way may read: it goes on
                # to that one when done (a replica's next copy while its first builds)
                self._again = True
                return
            # the stale index is never served, nor kept while its successor builds
            self.index = None
            self._builder = threading.Thread(
                target=self._build_from_file,
                args=(path, tuple(weights)),
                name="toolcat-lexical-index",
                daemon=True,  # a process that exits does not wait for an index it will not use
            )
            self._builder.start()

    def _build_from_file(self, path: str, weights: tuple[float, ...]) -> None:
        while True:
            self._build_once(path, weights)
            with self._starting:
                if not self._again:
                    # Not building from here on, though the thread lives a moment more: a
                    # revision asked for now starts a build (``_again`` would be unseen).
                    self._builder = None
                    return
                self._again = False

    def _build_once(self, path: str, weights: tuple[float, ...]) -> None:
        # Made apart and served below only if this one was not replaced meanwhile: the file
        # may have been replaced by another copy after it was opened.
        made = LexicalIndex(self.backend)
        made._distrusted, made._saves_for = self._distrusted, self
        try:
            conn = _read_only(path)
        except (sqlite3.Error, OSError, ValueError) as e:  # FTS5 answers on; a later query retries
            self.index, self.error = None, f"background build: {e}"
            return
        try:
            conn.execute("BEGIN")
            revision = reader.revision(conn)
            if self.at(revision, weights) is None and not made._load_or_build_saved(
                conn, revision, weights, path
            ):
                self.index = None  # a stale index is not kept while its successor builds
                made.build(conn, revision, weights)
        except Exception as e:  # FTS5 answers on; the next query past POSTINGS_AFTER retries
            self.index, self.error = None, f"background build: {e}"
            return
        finally:
            conn.close()
        with self._starting:
            if made.error:
                self.error = made.error
            if made.index is not None and not self._replaced:
                self.backend, self.index = made.backend, made.index

    def load_saved(
        self, conn: sqlite3.Connection, revision: int, weights: Sequence[float], path: str
    ) -> bool:
        """Take up the index saved beside the catalog at ``path`` now, on the calling thread,
        when it was saved at ``revision`` (call inside that revision's read transaction).
        Loading is a small part of building (about a second at 1M tools against a minute
        or two), and every write saves it: so a process asks FTS5 only for its first query,
        not for the minutes a background build would take. False when there is none."""
        from . import lexical_file

        weights = tuple(weights)
        if self.backend == "postings" or tantivy_module() is None or len(weights) != len(COLUMNS):
            return False
        if self.at(revision, weights) is not None:
            return True
        if not path:
            return False
        with self._starting:
            if self.at(revision, weights) is not None:  # another reader loaded it meanwhile
                return True
            if self.building:  # a background build (or load) of its own is under way
                return False
            valid_for = lexical_file.stamp(conn, revision, weights)
            forwarded = self._forward_held(conn, valid_for)
            if not forwarded:
                # at the revision the file was replaced at, the save's rows are checked on
                # the background build's thread (``_load_or_build_saved``), not here
                distrusted = revision == self._distrusted
                return not distrusted and self._restore(path, valid_for, revision, weights)
        self._save_soon(path, weights)
        return True

    def _forward_held(self, conn: sqlite3.Connection, valid_for: dict[str, Any]) -> bool:
        """Serve the index held, brought forward in memory to ``valid_for``'s revision by
        the rows changed since (``TantivyIndex.apply``), where ``bring_forward`` would bring
        a saved one forward: the same history, the log reaching back, few enough rows, and
        FTS5's totals where the log says. A server's next revision then costs what changed
        (a replica at 1M tools loaded its index from disk in 1.5 s a change, or answered from
        FTS5 while a background thread brought the saved one forward)."""
        held, revision = self.index, valid_for["revision"]
        if not isinstance(held, TantivyIndex) or held.history is None:
            return False
        if held.weights != tuple(valid_for["weights"]) or not 0 <= held.revision < revision:
            return False
        if held.history != reader.fts_history(conn, held.revision):
            return False  # another history reached that revision (a copy from a backup)
        limit = max(FORWARD_MIN, valid_for["rows"] // FORWARD_SHARE)
        changed = reader.fts_changes(conn, held.revision, limit)
        if changed is None or len(held._delta_rows) + len(held._stale) + len(changed) > limit:
            return False
        try:
            index = held.apply(conn, revision, changed)
        except Exception:  # built or loaded as before
            return False
        if (index.n_docs, index._length_total) != (valid_for["rows"], valid_for["tokens"]):
            return False  # the log and FTS5's totals disagree
        self.backend, self.index = "tantivy", index
        return True

    def _save_soon(self, path: str, weights: tuple[float, ...]) -> None:
        """Bring the index saved beside the catalog to its revision on a background thread
        (``save_current``, as a write does), so that a restart loads it: the index served
        was brought forward in memory. Nothing when there is no file or a save is under way."""
        if not path:
            return
        with self._starting:
            if self._saving:
                # it may have read an earlier revision: it saves once more when done
                self._save_again = True
                return
            self._saving = True
            self._saver = threading.Thread(
                target=self._save_current,
                args=(path, weights),
                name="toolcat-lexical-save",
                daemon=True,
            )
            try:
                self._saver.start()
            except RuntimeError:  # no thread to be had: the next write or build saves it
                self._saving = False

    def _save_current(self, path: str, weights: tuple[float, ...]) -> None:
        """``_save_soon``'s thread: ``save_current`` until no revision was brought forward
        in memory while it ran."""
        while True:
            if not self._fenced:
                with contextlib.suppress(Exception):  # the next write or build saves it
                    save_current(path, weights, distrusted=self._distrusted)
            with self._starting:
                if not self._save_again:
                    self._saving = False
                    return
                self._save_again = False

    def _load_or_build_saved(
        self, conn: sqlite3.Connection, revision: int, weights: tuple[float, ...], path: str
    ) -> bool:
        """Take up the index saved beside the catalog if it was saved at this revision,
        else build one and save it there (search/lexical_file.py). False when neither can
        be done here (no tantivy, weights tantivy cannot take, a folder not writable)."""
        from ..files import checks as saved_files
        from . import lexical_file

        if self.backend == "postings" or tantivy_module() is None or len(weights) != len(COLUMNS):
            return False
        if self._fenced:
            return False  # built in memory, never saved: perhaps the damaged copy's rows
        valid_for = lexical_file.stamp(conn, revision, weights)
        if revision == self._distrusted:
            valid_for["content"] = content_digest(conn)
        if self._restore(path, valid_for, revision, weights):
            return True
        root = lexical_file.trusted_folder(path, create=True)
        if root is None:
            return False
        with saved_files.build_lock(root) as held:
            if not held or self._fenced:
                return False
            # Another process may have saved it while this one waited for the lock.
            if self._restore(path, valid_for, revision, weights):
                return True
            # An earlier revision's index, brought forward by the rows changed since (a
            # replica's case, or a writer that saved nothing).
            try:
                done, forward = bring_forward(conn, path, root, valid_for, self._distrusted)
            except OSError:
                done, forward = False, None
            if forward is not None:
                self.backend, self.index = "tantivy", forward
                return True
            if done and self._restore(path, valid_for, revision, weights):
                return True
            # A revision that changed no row (vectors, by a writer that saved nothing): the
            # saved index is stamped forward and loaded, not built (a replica's case).
            if lexical_file.restamp_unchanged(
                root, valid_for, lambda: content_digest(conn)
            ) and self._restore(path, valid_for, revision, weights):
                return True
            try:
                directory = lexical_file.new_tantivy_folder(root)
            except OSError:
                return False
            import shutil  # not on the one-shot search path

            index = TantivyIndex()
            try:
                index.build(conn, revision, weights, directory)
            except (AttributeError, TypeError, ValueError, OSError):
                shutil.rmtree(directory, ignore_errors=True)
                return False  # ``build`` tries again in memory (or falls back to postings)
            try:
                if self._fenced:  # replaced while it built: the narrowest window left
                    raise OSError("the copy this was built from was replaced")
                lexical_file.save(root, valid_for, directory, index.state())
            except OSError:
                # A full disk: served from memory all the same (the open index keeps its
                # files mapped), nothing half-written left behind.
                shutil.rmtree(directory, ignore_errors=True)
        self.backend, self.index = "tantivy", index
        return True

    def _restore(
        self, path: str, valid_for: dict[str, Any], revision: int, weights: tuple[float, ...]
    ) -> bool:
        """Take up the index saved beside the catalog at ``path`` for ``valid_for``; False
        when there is none or it does not open."""
        from . import lexical_file

        saved = lexical_file.load(path, valid_for)
        if saved is None:
            return False
        index = TantivyIndex()
        try:
            index.restore(revision, weights, *saved)
        except Exception:  # a saved index that does not open: built again
            return False
        index.history = valid_for["history"]
        self.backend, self.index = "tantivy", index
        return True

    def adopt(self, index: TantivyIndex) -> None:
        """Serve ``index`` (built and saved by ``save_current`` in this process) unless this
        one serves the pure-Python index or holds a newer revision."""
        with self._starting:
            if self.backend != "postings" and index.revision > self.revision:
                self.backend, self.index = "tantivy", index

    def build(self, conn: sqlite3.Connection, revision: int, weights: Sequence[float]) -> None:
        """Rebuild from ``tools_fts`` (call inside the read transaction of ``revision``)."""
        if self.backend is None:
            self.backend = "tantivy" if tantivy_module() is not None else "postings"
        self.index = None  # a stale index is never served, nor kept while its successor builds
        if self.backend == "tantivy" and len(weights) == len(COLUMNS):
            tantivy_index = TantivyIndex()
            try:
                tantivy_index.build(conn, revision, weights)
            except (AttributeError, TypeError, ValueError, OSError) as e:
                # A tantivy release whose API differs from the one this was written for
                # (0.27): search on with the pure-Python index, which scores the same.
                self.backend, self.error = "postings", f"tantivy index: {e}"
            else:
                self.index = tantivy_index
                return
        index = PostingsIndex()
        index.build(conn, revision, weights)
        self.index = index

    def search(self, text: str, k: int, max_terms: int) -> list[tuple[int, float]]:
        """The ``k`` best (row id, score), best first; call only when ``current``."""
        assert self.index is not None
        return self.index.search(text, k, max_terms)


def _read_only(path: str) -> sqlite3.Connection:
    """A read-only connection of its own on the catalog file at ``path``."""
    return sqlite3.connect(
        Path(path).resolve().as_uri() + "?mode=ro",
        uri=True,
        isolation_level=None,
        check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )


def save_current(
    path: str, weights: Sequence[float], min_tools: int = 0, *, distrusted: int | None = None
) -> TantivyIndex | None:
    """Bring the BM25 index saved beside the catalog at ``path`` (search/lexical_file.py) to
    the catalog's revision now, so that the next process to serve it loads it instead of
    building it: what every write to the catalog calls once it has committed.

    The index saved at an earlier revision is brought forward by the rows changed since
    (``bring_forward``) when the change log reaches back to it and they are few; else it is
    built whole. tantivy's own documents are never added or deleted: the padding that makes
    its scores bound FTS5's depends on the average length, which any change moves.

    ``distrusted``: a revision at which the file replaced a copy found damaged
    (``LexicalIndex._distrusted``): a save stamped at it counts only by its rows' digest,
    and none stamped at or before it is brought forward.

    Returns:
        The index built and saved; None when there was nothing to do: the saved one is
        current, the catalog indexes fewer than ``min_tools`` tools (a process builds those
        in memory without looking for a saved index), or tantivy is not installed.

    Raises:
        OSError: It could not be saved: the folder is not one toolcat may trust, another
            process held the build lock past ``LOCK_WAIT_S``, the disk is full, tantivy
            failed. Nothing half-written stays; the next process to serve builds it.
    """
    import shutil

    from ..files import checks as saved_files
    from . import lexical_file

    weights = tuple(weights)
    if tantivy_module() is None or len(weights) != len(COLUMNS):
        return None
    try:
        conn = _read_only(path)
    except sqlite3.Error as e:
        raise OSError(f"cannot read the catalog: {e}") from e
    try:
        if distrusted is None and _saved_is_current(conn, path, weights, min_tools):
            return None
        root = lexical_file.trusted_folder(path, create=True)
        if root is None:
            raise OSError(
                f"{str(lexical_file.folder(path))!r} is not a folder toolcat could make or "
                "may trust (a real folder, not a symlink, of the catalog's owner, that not "
                "everyone may write)"
            )
        with saved_files.build_lock(root) as held:
            if not held:
                raise OSError(f"could not take {str(root / saved_files.LOCK)!r}")
            conn.execute("BEGIN")
            try:
                revision = reader.revision(conn)
                valid_for = lexical_file.stamp(conn, revision, weights)
                if revision == distrusted:
                    valid_for["content"] = content_digest(conn)
                if valid_for["rows"] < min_tools or lexical_file.stamped(path, valid_for):
                    return None  # saved by another process while this one waited
                done, forward = bring_forward(conn, path, root, valid_for, distrusted)
                if done:
                    return forward
                if lexical_file.restamp_unchanged(root, valid_for, lambda: content_digest(conn)):
                    return None  # the same rows at a new revision (vectors changed): kept
                directory = lexical_file.new_tantivy_folder(root)
                index = TantivyIndex()
                try:
                    index.build(conn, revision, weights, directory)
                    lexical_file.save(root, valid_for, directory, index.state())
                except BaseException:
                    shutil.rmtree(directory, ignore_errors=True)
                    raise
            finally:
                conn.execute("ROLLBACK")  # a read transaction: nothing to keep
    except (AttributeError, TypeError, ValueError, sqlite3.Error) as e:
        raise OSError(f"building it failed: {e}") from e
    finally:
        conn.close()
    return index


def bring_forward(
    conn: sqlite3.Connection,
    path: str,
    root: Path,
    valid_for: dict[str, Any],
    distrusted: int | None = None,
) -> tuple[bool, TantivyIndex | None]:
    """Bring the index saved beside the catalog at an earlier revision to ``valid_for``'s
    by the rows the change log says changed since (``TantivyIndex.apply``), and save it:
    seconds at 1M tools where a build takes minutes. When no row changed (vectors alone)
    its stamp is moved to this revision and nothing is read (``load`` checks the files
    before anything is served). Call holding ``build_lock``, inside ``valid_for``'s read
    transaction.

    ``distrusted``: no save stamped at or before this revision is brought forward (the file
    replaced a copy found damaged there: ``LexicalIndex._distrusted``).

    Returns:
        (whether it was done, the index brought forward: None when only the stamp moved).
        Not done: no earlier save, the log does not reach back to it, more rows changed
        than ``FORWARD_SHARE`` allows, the save does not open or its rows do not add up to
        FTS5's totals.

    Raises:
        OSError: The index could not be saved (a full disk); nothing half-written stays.
    """
    from ..files import checks as saved_files
    from . import lexical_file

    header = lexical_file.earlier_stamp(path, valid_for)
    if header is None:
        return False, None
    if distrusted is not None and header["revision"] <= distrusted:
        return False, None  # perhaps saved from the damaged copy the file replaced
    if header.get("history") != reader.fts_history(conn, header["revision"]):
        return False, None  # saved by another history of the catalog (one restored from a backup)
    limit = max(FORWARD_MIN, valid_for["rows"] // FORWARD_SHARE)
    changed = reader.fts_changes(conn, header["revision"], limit)
    if changed is None:
        return False, None
    # FTS5's own row and token totals (the stamp's) must move as the log says: a row
    # changed by hand, unlogged, is caught by them (most are) and means a build.
    if not changed:  # the same rows: the same files, stamped for this revision
        if (header.get("rows"), header.get("tokens")) != (valid_for["rows"], valid_for["tokens"]):
            return False, None
        saved_files.replace_stamp(root, {**header, **valid_for})
        return True, None
    saved = lexical_file.load_earlier(path, valid_for)
    if saved is None or saved[2]["revision"] != header["revision"]:
        return False, None
    directory, state, header = saved
    index = TantivyIndex()
    try:
        index.restore(header["revision"], valid_for["weights"], directory, state)
        if len(index._delta_rows) + len(index._stale) + len(changed) > limit:
            return False, None
        index = index.apply(conn, valid_for["revision"], changed)
    except Exception:  # a saved index that does not open or add up: built again
        return False, None
    if (index.n_docs, index._length_total) != (valid_for["rows"], valid_for["tokens"]):
        return False, None  # the log and FTS5's totals disagree: built again
    tools = index.forward_tools(state, changed)
    lexical_file.save(root, valid_for, directory, index.state(tools), header["tantivy_files"])
    return True, index


def _saved_is_current(
    conn: sqlite3.Connection, path: str, weights: tuple[float, ...], min_tools: int
) -> bool:
    """Whether nothing needs saving: the stamp is of the revision ``conn`` reads now, or
    the catalog is too small to be served from a saved index."""
    from . import lexical_file

    conn.execute("BEGIN")
    try:
        valid_for = lexical_file.stamp(conn, reader.revision(conn), weights)
    finally:
        conn.execute("ROLLBACK")
    return valid_for["rows"] < min_tools or lexical_file.stamped(path, valid_for)
