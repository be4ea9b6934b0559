"""Retrieval quality on public tool-retrieval benchmarks (the ``../shared/bench`` format).

Each source folder holds ``tools.jsonl`` and ``queries.jsonl``. The tools are registered
into a temporary catalog through the ordinary API and every query is answered by
``Catalog.search`` — there is no evaluation-only ranking path.

Names the catalog cannot take as they are (``math.factorial``, ``hf:org/model``,
``GET /movie/{id}``) are mapped to ``[A-Za-z0-9_-]{1,64}`` (other characters become ``_``;
long or colliding names get a short hash suffix) and counted. Parameter schemas that are not
valid JSON Schema are rebuilt from their property names and descriptions, and counted.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog import Catalog
from ..definitions.names import fitted_name
from ..errors import InvalidQueryError, ToolcatError
from ..models import Tool, Toolkit
from ..store import writer

K_VALUES = (1, 5, 10)
# Regex mode reads a query as a pattern: it has no place in scoring natural-language requests.
DEFAULT_MODES = ("bm25", "embedding", "hybrid")
PROGRESS_EVERY_S = 10.0
BASELINE_MODES = ("rrf-baseline", "minilm-baseline")
BASELINE_DEPTH = 100  # each ranking fused by the plain RRF keeps this many tools
Encoder = Callable[[Sequence[str]], Any]  # texts -> float32 unit vectors, one row each


@dataclass
class Query:
    id: str
    text: str
    relevant: list[str]  # the gold tools (strict scoring)
    any_of: list[list[str]] | None  # per gold tool, every name that also counts (lenient)
    split: str | None = None


@dataclass
class Source:
    """One benchmark source, with its tools mapped to catalog names."""

    name: str
    toolkit: Toolkit
    queries: list[Query]
    names_mapped: int = 0
    schemas_repaired: int = 0
    lenient: bool = False
    name_map: dict[str, str] = field(default_factory=dict)


def catalog_name(raw: str, taken: set[str]) -> str:
    """Map a benchmark tool name to a catalog tool name, uniquely within ``taken``."""
    return fitted_name(raw, taken)


def _repair_schema(parameters: Any) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    raw = parameters.get("properties") if isinstance(parameters, dict) else None
    for key, prop in (raw or {}).items():
        description = prop.get("description") if isinstance(prop, dict) else None
        properties[str(key)] = {"description": description} if isinstance(description, str) else {}
    return {"type": "object", "properties": properties}


def _toolkit_name(source: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", source.lower())[:64] or "source"


def load_source(folder: Path) -> Source:
    """Read one source folder into a ``Toolkit`` and its queries; ``ToolcatError`` naming
    the folder when a file is not UTF-8 JSON lines of the expected shape."""
    try:
        return _read_source(folder)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ToolcatError(
            f"benchmark source {folder.name!r} cannot be read: {type(e).__name__}: {str(e)[:200]}"
        ) from None


def _read_source(folder: Path) -> Source:
    name = folder.name
    tools: list[Tool] = []
    taken: set[str] = set()
    name_map: dict[str, str] = {}
    mapped = repaired = 0
    for line in (folder / "tools.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        tool_name = catalog_name(raw["name"], taken)
        mapped += tool_name != raw["name"]
        name_map[raw["name"]] = tool_name
        tags = [
            t.strip()[:64]
            for t in [raw.get("toolkit") or "", *raw.get("tags", [])]
            if isinstance(t, str) and t.strip()
        ]
        definition = {
            "name": tool_name,
            "description": (raw.get("description") or "").strip() or raw["name"],
            "parameters": raw.get("parameters") or {"type": "object", "properties": {}},
            "tags": tags,
        }
        try:
            tools.append(Tool.model_validate(definition))
        except ValueError:
            definition["parameters"] = _repair_schema(definition["parameters"])
            tools.append(Tool.model_validate(definition))
            repaired += 1
    toolkit = Toolkit(name=_toolkit_name(name), version="1", description="", tools=tools)
    queries = []
    lenient = False
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        groups = raw.get("relevant_any_of")
        lenient = lenient or groups is not None
        queries.append(
            Query(
                id=str(raw["id"]),
                text=raw["query"],
                relevant=[name_map[n] for n in raw["relevant"] if n in name_map],
                any_of=None
                if groups is None
                else [[name_map[n] for n in group if n in name_map] for group in groups],
                split=None if raw.get("split") is None else str(raw["split"]),
            )
        )
    return Source(name, toolkit, queries, mapped, repaired, lenient, name_map)


def source_folders(bench_dir: Path, only: Sequence[str] = ()) -> list[Path]:
    folders = sorted(
        p
        for p in bench_dir.iterdir()
        if (p / "tools.jsonl").is_file() and (p / "queries.jsonl").is_file()
    )
    if only:
        known = {p.name for p in folders}
        missing = [s for s in only if s not in known]
        if missing:
            raise ToolcatError(
                f"no source {', '.join(missing)} in {bench_dir}; have {sorted(known)}"
            )
        folders = [p for p in folders if p.name in only]
    if not folders:
        raise ToolcatError(f"no benchmark sources (tools.jsonl + queries.jsonl) in {bench_dir}")
    return folders


def score_query(ranked: Sequence[str], relevant: Sequence[Sequence[str]]) -> dict[str, float]:
    """Recall@1/5/10, nDCG@10 and MRR@10 for one query (binary relevance).

    ``relevant`` holds one group per gold tool: retrieving any member of a group finds it,
    once. Strict scoring passes one-member groups.
    """
    groups = [set(g) for g in relevant if g]
    if not groups:
        return {}
    found_at: dict[int, int] = {}  # group index -> rank (1-based) where first found
    gains: list[float] = []
    for rank, tool in enumerate(ranked[:10], 1):
        gain = 0.0
        for i, group in enumerate(groups):
            if i not in found_at and tool in group:
                found_at[i] = rank
                gain = 1.0
                break
        gains.append(gain)
    scores = {f"R@{k}": sum(1 for r in found_at.values() if r <= k) / len(groups) for k in K_VALUES}
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(groups), 10)))
    scores["nDCG@10"] = dcg / ideal
    scores["MRR@10"] = 1 / min(found_at.values()) if found_at else 0.0
    return scores


def _average(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = [r for r in rows if r]
    keys = [f"R@{k}" for k in K_VALUES] + ["nDCG@10", "MRR@10"]
    return {k: round(sum(r[k] for r in rows) / len(rows), 4) if rows else 0.0 for k in keys}


Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


@dataclass
class Plan:
    """Which queries of a source teach the catalog and which are scored."""

    learn: list[Query]
    score: list[Query]


def split_queries(
    source: Source,
    *,
    learn_split: str | None,
    learn_fraction: float | None,
    max_queries: int | None,
    seed: int,
) -> Plan:
    """The learning queries (never scored) and a seeded sample of the rest to score."""
    learn: list[Query] = []
    rest = list(source.queries)
    if learn_split is not None:
        learn = [q for q in rest if q.split == learn_split]
        rest = [q for q in rest if q.split != learn_split]
    elif learn_fraction is not None:
        shuffled = random.Random(f"{seed}:{source.name}:learn").sample(rest, len(rest))
        cut = round(len(shuffled) * learn_fraction)
        chosen = {id(q) for q in shuffled[:cut]}
        learn = [q for q in rest if id(q) in chosen]
        rest = [q for q in rest if id(q) not in chosen]
    if max_queries is not None and len(rest) > max_queries:
        rest = random.Random(seed).sample(rest, max_queries)
    return Plan(learn, rest)


def validate(
    bench_dir: Path,
    sources: Sequence[str],
    modes: Sequence[str],
    max_queries: int | None,
    learn_split: str | None,
    learn_fraction: float | None,
) -> list[Path]:
    """Check every option before any work; returns the source folders."""
    from ..search.engine import SEARCH_MODES

    if not bench_dir.is_dir():
        raise ToolcatError(f"no benchmark folder {str(bench_dir)!r}")
    unknown = [m for m in modes if m not in SEARCH_MODES]
    if unknown:
        raise ToolcatError(f"unknown search mode {unknown[0]!r}; use one of {SEARCH_MODES}")
    if not modes:
        raise ToolcatError("give at least one search mode")
    if max_queries is not None and max_queries < 1:
        raise ToolcatError(f"max_queries must be at least 1, not {max_queries}")
    if learn_split is not None and learn_fraction is not None:
        raise ToolcatError("give --learn-split or --learn-fraction, not both")
    if learn_fraction is not None and not 0 < learn_fraction < 1:
        raise ToolcatError(
            f"learn_fraction must be between 0 and 1 (exclusive), not {learn_fraction}"
        )
    folders = source_folders(bench_dir, sources)
    if learn_split is not None:
        splits: set[str] = set()
        for folder in folders:
            for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
                if line.strip():
                    splits.add(str(json.loads(line).get("split")))
        if learn_split not in splits:
            raise ToolcatError(
                f"no query has split {learn_split!r}; the sources have {sorted(splits)[:20]}"
            )
    return folders


def evaluate(
    bench_dir: str | Path,
    *,
    sources: Sequence[str] = (),
    modes: Sequence[str] = DEFAULT_MODES,
    pooled: bool = False,
    max_queries: int | None = None,
    seed: int = 0,
    learn_split: str | None = None,
    learn_fraction: float | None = None,
    abstention: bool = False,
    vector_cache: str | Path | None = None,
    baseline: bool = False,
    baseline_encoder: Encoder | None = None,
    embedding_model: str | None = None,
    progress: Progress | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    score_only: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Score search modes on benchmark sources.

    Args:
        bench_dir: Folder of sources in the ``../shared/bench`` format.
        sources: Only these sources (folder names); default all.
        modes: Search modes to score (default bm25, embedding and hybrid).
        pooled: Search every source's queries against all sources' tools in one catalog.
        max_queries: Score a seeded sample of at most this many queries per source.
        seed: Seed of that sample and of ``learn_fraction``'s share.
        learn_split: Replay the queries of this split as usage (record each one with its
            gold tools), reindex, and score only the other queries (never a learned one).
        learn_fraction: The same with a seeded share of each source's queries. With
            either, each source's scored queries are scored twice, before learning
            (``learned_from`` 0) and after, so the two rows compare like with like.
        abstention: Also count how often search says no tool fits, in the source's own
            catalog (``abstain_own``) and in one holding every other source's tools but
            none of its own (``abstain_foreign``).
        vector_cache: A file of tool vectors (created if missing) that reindexing takes
            from and adds to, so repeated evaluations embed each tool once.
        baseline: Also score the plain baseline on the same queries (``toolcat.quality.baseline``):
            rank-bm25 fused with the base MiniLM by reciprocal rank (``rrf-baseline``) and
            the base MiniLM alone (``minilm-baseline``).
        baseline_encoder: What encodes texts for the baseline (default: the base MiniLM
            with sentence-transformers); ``scripts/loso_eval.py`` passes stored vectors.
        embedding_model: The catalogs' embedding model (default: a new catalog's).
        progress: Called with a line of progress now and then.
        on_row: Called with each row as soon as it is computed.
        score_only: Score only these sources' queries; the other sources still give their
            tools (with ``pooled``: distractors). Default: every source.

    Returns:
        One row per source and mode (the baseline's two after toolcat's): ``source``,
        ``mode``, ``queries``, ``R@1``, ``R@5``, ``R@10``, ``nDCG@10``, ``MRR@10``
        (strict), ``multi_tool`` (the same for queries with two or more gold tools),
        ``learned_from`` (uses recorded before scoring), ``lenient`` where the source
        has alternatives, and the name mapping counts.
    """
    bench = Path(bench_dir)
    folders = validate(bench, sources, modes, max_queries, learn_split, learn_fraction)
    say = progress or _quiet
    loaded = [load_source(f) for f in folders]
    unknown = sorted(set(score_only) - {s.name for s in loaded})
    if unknown:
        raise ToolcatError(f"cannot score {', '.join(unknown)}: not among the sources loaded")
    scoring = {s.name for s in loaded if not score_only or s.name in score_only}
    scored = [s for s in loaded if s.name in scoring]
    plans = {
        s.name: split_queries(
            s,
            learn_split=learn_split,
            learn_fraction=learn_fraction,
            max_queries=max_queries,
            seed=seed,
        )
        for s in loaded
    }
    learning = learn_split is not None or learn_fraction is not None
    cache = Path(vector_cache) if vector_cache is not None else None
    results: list[dict[str, Any]] = []

    def emit(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            results.append(row)
            if on_row is not None:
                on_row(row)

    needs_vectors = any(m in ("embedding", "hybrid") for m in modes) or abstention
    plain = Baseline(baseline_encoder) if baseline else None
    with tempfile.TemporaryDirectory(prefix="toolcat-eval-") as tmp:
        foreign: Catalog | None = None
        if abstention and len(loaded) > 1:
            say("abstention: building a catalog of every source's tools")
            foreign = Catalog(Path(tmp) / "all.db", embedding_model=embedding_model)
            foreign.register(*(s.toolkit for s in loaded))
            _reindex(foreign, "all sources", say, cache)
        try:
            # One catalog of every source's tools (pooled), or one per source.
            groups = [(loaded, "pooled")] if pooled else [([s], s.name) for s in scored]
            for group, label in groups:
                path = Path(tmp) / ("pooled.db" if pooled else f"{group[0].toolkit.name}.db")
                with Catalog(path, embedding_model=embedding_model) as catalog:
                    catalog.register(*(s.toolkit for s in group))
                    if needs_vectors:
                        if foreign is not None:
                            _copy_vectors(catalog, foreign.path)
                        _reindex(catalog, label, say, cache)
                    learned = 0
                    if learning:  # the same queries scored before learning, then after
                        for source in (s for s in group if s.name in scoring):
                            score = plans[source.name].score
                            emit(_run(catalog, source, score, modes, pooled, 0, None, False, say))
                        for source in group:
                            learned += _learn(catalog, source, plans[source.name].learn, say)
                        _reindex(catalog, f"{label}, after learning", say)
                    for source in (s for s in group if s.name in scoring):
                        score = plans[source.name].score
                        emit(
                            _run(
                                catalog,
                                source,
                                score,
                                modes,
                                pooled,
                                learned,
                                foreign,
                                abstention,
                                say,
                            )
                        )
                        if plain is not None:
                            say(f"{source.name}: plain baseline")
                            emit(plain.rows(source, score, group, pooled))
        finally:
            if foreign is not None:
                foreign.close()
    return results


def summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per mode (and before/after learning), R@5 and nDCG@10 averaged over the sources
    (each source weighs the same), with the margin over ``rrf-baseline`` where it was
    scored: the line every table ends with under ``--baseline``."""
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for row in _with_queries(rows):
        groups.setdefault((row["mode"], bool(row.get("learned_from"))), []).append(row)
    means = {
        key: {k: round(sum(r[k] for r in group) / len(group), 4) for k in ("R@5", "nDCG@10")}
        for key, group in groups.items()
    }
    plain = means.get(("rrf-baseline", False))
    out = []
    for (mode, learned), mean in means.items():
        line: dict[str, Any] = {"mode": mode, "sources": len(groups[mode, learned]), **mean}
        if learned:
            line["learned"] = True
        if plain is not None:
            line["vs_rrf_baseline"] = {k: round(mean[k] - plain[k], 4) for k in mean}
        out.append(line)
    return out


MARGIN_METRICS = ("R@5", "nDCG@10")
# The table of ``margins``: the default (hybrid), toolcat's single modes, the plain baseline.
MARGIN_MODES = ("hybrid", "bm25", "embedding", "rrf-baseline", "minilm-baseline")


def margins(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per source (and before/after learning), R@5 and nDCG@10 of the default (hybrid), of
    toolcat's single modes and of the plain baseline, and the margins the issue judges: the
    default over plain RRF (``vs_rrf``), the default over the better of toolcat's single
    modes for that metric (``vs_best_single``: fusion must never cost), and toolcat's
    embedding over the base MiniLM (``embedding_vs_minilm``). A margin whose modes were not
    both scored is absent. The last line (``source`` "mean") averages every source alike,
    margins included (over the sources that have them)."""
    by_source: dict[tuple[str, bool], dict[str, dict[str, Any]]] = {}
    for row in _with_queries(rows):
        if row["mode"] in MARGIN_MODES:
            key = (row["source"], bool(row.get("learned_from")))
            by_source.setdefault(key, {})[row["mode"]] = row
    lines: list[dict[str, Any]] = []
    for (source, learned), modes in by_source.items():
        line: dict[str, Any] = {"source": source, "pooled": bool(_first(modes).get("pooled"))}
        if learned:
            line["learned"] = True
        for mode in MARGIN_MODES:
            if mode in modes:
                line[mode] = {k: modes[mode][k] for k in MARGIN_METRICS}
        singles = [line[m] for m in ("bm25", "embedding") if m in line]
        for name, high, low in (
            ("vs_rrf", line.get("hybrid"), line.get("rrf-baseline")),
            (
                "vs_best_single",
                line.get("hybrid"),
                {k: max(s[k] for s in singles) for k in MARGIN_METRICS} if singles else None,
            ),
            ("embedding_vs_minilm", line.get("embedding"), line.get("minilm-baseline")),
        ):
            if high is not None and low is not None:
                line[name] = {k: round(high[k] - low[k], 4) for k in MARGIN_METRICS}
        lines.append(line)
    for learned in (False, True):
        group = [line for line in lines if bool(line.get("learned")) is learned]
        if not group:
            continue
        mean: dict[str, Any] = {"source": "mean", "pooled": group[0]["pooled"]}
        if learned:
            mean["learned"] = True
        for column in (*MARGIN_MODES, "vs_rrf", "vs_best_single", "embedding_vs_minilm"):
            have = [line[column] for line in group if column in line]
            if have:
                mean[column] = {
                    k: round(sum(h[k] for h in have) / len(have), 4) for k in MARGIN_METRICS
                }
                mean[column]["sources"] = len(have)
        lines.append(mean)
    return lines


def _with_queries(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a mean may count: a source with no query to score has no figure (its rows'
    0.0 would pull every mean down)."""
    return [row for row in rows if row.get("queries") != 0]


def _first(modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return next(iter(modes.values()))


def _copy_vectors(catalog: Catalog, source: Path) -> None:
    """Take the vectors of identical tool definitions from another catalog file (same model),
    so that the abstention catalog and the per-source ones embed each tool once."""
    conn = catalog._conn  # evaluation-only shortcut: vectors are keyed by content hash
    conn.execute("ATTACH DATABASE ? AS other", (str(source),))
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT OR IGNORE INTO embeddings SELECT e.* FROM other.embeddings e "
            "WHERE e.content_hash IN (SELECT content_hash FROM tools)"
        )
        conn.execute(
            "INSERT OR REPLACE INTO meta SELECT key, value FROM other.meta "
            "WHERE key IN ('embedding_model', 'embedding_dim', 'embedding_producer')"
        )
        writer.bump_revision(conn)  # a new revision, its history mark too
        conn.execute("COMMIT")
    finally:
        conn.execute("DETACH DATABASE other")


def _exchange_vectors(catalog: Catalog, cache: Path, *, take: bool) -> None:
    """Take the vectors of identical definitions from ``cache`` (``take``) or put the
    catalog's new ones there: a file of (content hash, model, vector) rows, so repeated
    evaluations embed each tool once."""
    from ..search.embeddings import DEFAULT_MODEL

    conn = catalog._conn  # evaluation-only shortcut, as _copy_vectors
    try:
        with sqlite3.connect(cache) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS embeddings (content_hash TEXT NOT NULL, "
                "model TEXT NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (content_hash, model))"
            )
            # What made the cached vectors (model + export digest): a catalog taking them
            # records it, so its reindex re-embeds them if today's encoder differs.
            db.execute(
                "CREATE TABLE IF NOT EXISTS producers (model TEXT PRIMARY KEY, producer TEXT)"
            )
        conn.execute("ATTACH DATABASE ? AS cache", (str(cache),))
    except sqlite3.DatabaseError as e:
        raise ToolcatError(f"cannot use {str(cache)!r} as a vector cache: {e}") from e
    try:
        conn.execute("BEGIN IMMEDIATE")
        if take:
            row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
            model = row[0] if row and row[0] else DEFAULT_MODEL
            copied = conn.execute(
                "INSERT OR IGNORE INTO embeddings (content_hash, model, vector) "
                "SELECT content_hash, model, vector FROM cache.embeddings "
                "WHERE model = ? AND content_hash IN (SELECT content_hash FROM tools)",
                (model,),
            ).rowcount
            if copied:
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('embedding_model', ?), "
                    "('embedding_dim', (SELECT length(vector) / 4 FROM embeddings LIMIT 1))",
                    (model,),
                )
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) SELECT 'embedding_producer', "
                    "producer FROM cache.producers WHERE model = ?",
                    (model,),
                )
                writer.bump_revision(conn)  # a new revision, its history mark too
        else:
            conn.execute(
                "INSERT OR IGNORE INTO cache.embeddings (content_hash, model, vector) "
                "SELECT content_hash, model, vector FROM main.embeddings"
            )
            conn.execute(
                "INSERT OR REPLACE INTO cache.producers (model, producer) SELECT m.value, "
                "p.value FROM meta m JOIN meta p ON p.key = 'embedding_producer' "
                "WHERE m.key = 'embedding_model'"
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        conn.execute("DETACH DATABASE cache")


def reindex_with_vector_cache(catalog: Catalog, cache: str | Path) -> None:
    """Reindex ``catalog`` taking vectors of identical definitions from ``cache`` first and
    putting the new ones back (``evaluate(vector_cache=...)``; the fitting scripts too)."""
    _reindex(catalog, str(catalog.path), _quiet, Path(cache))


def _reindex(catalog: Catalog, what: str, say: Progress, cache: Path | None = None) -> None:
    if cache is not None:
        _exchange_vectors(catalog, cache, take=True)
    started = time.monotonic()
    last = [started]

    def tick(done: int, total: int) -> None:
        if time.monotonic() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.monotonic()
            say(f"{what}: embedded {done}/{total} tools")

    report = catalog.reindex(progress=tick)
    if report.embedded or report.seconds > PROGRESS_EVERY_S:
        say(f"{what}: embedded {report.embedded} tools in {report.seconds:.0f}s")
    if cache is not None and report.embedded:
        _exchange_vectors(catalog, cache, take=False)


def _learn(catalog: Catalog, source: Source, queries: Sequence[Query], say: Progress) -> int:
    """Replay queries as usage: record each (query, gold tool) pair, in one transaction;
    returns the uses recorded. What a search would have returned does not change what is
    recorded (the gold tools), so none is run: replaying metatool's 10k learning queries
    takes a second, not minutes."""
    prefix = f"{source.toolkit.name}."
    uses = catalog.record_uses((q.text, prefix + name) for q in queries for name in q.relevant)
    if queries:
        say(f"{source.name}: learned {uses} uses from {len(queries)} queries")
    return uses


def _run(
    catalog: Catalog,
    source: Source,
    queries: Sequence[Query],
    modes: Sequence[str],
    pooled: bool,
    learned: int,
    foreign: Catalog | None,
    abstention: bool,
    say: Progress,
) -> list[dict[str, Any]]:
    rows = []
    for mode in modes:
        rankings: list[list[str]] = []
        abstained = refused = 0
        started = last = time.monotonic()
        for i, query in enumerate(queries, 1):
            try:
                result = catalog.search(query.text, mode=mode, k=10)
                ranked = [h.tool.id if pooled else h.tool.name for h in result.hits]
                abstained += result.no_match
            except InvalidQueryError:
                ranked = []  # a query the mode refuses (a regex over the length limit)
                refused += 1
            rankings.append(ranked)
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                say(f"{source.name} {mode}: {i}/{len(queries)} queries, {last - started:.0f}s")
        row = _scored(source, mode, pooled, queries, rankings, learned)
        if refused:
            row["refused"] = refused
        if abstention:
            row["abstain_own"] = round(abstained / len(queries), 4) if queries else 0.0
            row["abstain_foreign"] = (
                None if foreign is None else _abstain_foreign(foreign, source, queries, mode)
            )
        rows.append(row)
    return rows


def _scored(
    source: Source,
    mode: str,
    pooled: bool,
    queries: Sequence[Query],
    rankings: Sequence[Sequence[str]],
    learned: int = 0,
) -> dict[str, Any]:
    """The row of one source and mode: its queries' rankings (catalog ids when ``pooled``,
    else tool names) scored strictly, for multi-tool queries, and leniently where the
    source has alternatives."""
    prefix = f"{source.toolkit.name}." if pooled else ""
    strict, lenient, multi = [], [], []
    for query, ranked in zip(queries, rankings, strict=True):
        scores = score_query(ranked, [[prefix + n] for n in query.relevant])
        strict.append(scores)
        if len(query.relevant) >= 2:
            multi.append(scores)
        if query.any_of is not None:
            lenient.append(score_query(ranked, [[prefix + n for n in g] for g in query.any_of]))
    row: dict[str, Any] = {
        "source": source.name,
        "mode": mode,
        "pooled": pooled,
        "queries": len(queries),
        **_average(strict),
        "multi_tool": {"queries": len(multi), **_average(multi)},
        "learned_from": learned,
        "names_mapped": source.names_mapped,
        "schemas_repaired": source.schemas_repaired,
    }
    if source.lenient:
        row["lenient"] = _average(lenient)
    return row


class Baseline:
    """The plain baseline (``toolcat.quality.baseline``) over a catalog's tools, scored like a mode.
    Tool vectors are kept by text, so the pooled catalog and each source embed a text once."""

    def __init__(self, encoder: Encoder | None = None) -> None:
        self._encoder = encoder
        self._vectors: dict[str, Any] = {}

    def encode(self, texts: Sequence[str]) -> Any:
        import numpy as np

        from . import baseline

        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            if self._encoder is None:
                model = baseline.base_model()
                self._encoder = lambda batch: baseline.encode(model, batch)
            self._vectors.update(zip(missing, self._encoder(missing), strict=True))
        return np.stack([self._vectors[t] for t in texts])

    def rows(
        self, source: Source, queries: Sequence[Query], sources: Sequence[Source], pooled: bool
    ) -> list[dict[str, Any]]:
        """``rrf-baseline`` and ``minilm-baseline`` rows for ``source``'s ``queries``,
        searched among the tools of ``sources``."""
        from . import baseline

        documents = {
            (f"{s.toolkit.name}.{t.name}" if pooled else t.name): baseline.plain_text(t)
            for s in sources
            for t in s.toolkit.tools
        }
        names = list(documents)
        bm25 = baseline.PlainBM25(documents)
        matrix = self.encode([documents[n] for n in names])
        vectors = self.encode([q.text for q in queries]) if queries else []
        dense, fused = [], []
        for query, vector in zip(queries, vectors, strict=True):
            by_meaning = baseline.dense_rank(vector, names, matrix, BASELINE_DEPTH)
            by_words = bm25.rank(query.text, BASELINE_DEPTH)
            dense.append(by_meaning[:10])
            fused.append(baseline.rrf([by_words, by_meaning], 10))
        return [
            _scored(source, mode, pooled, queries, ranked)
            for mode, ranked in zip(BASELINE_MODES, (fused, dense), strict=True)
        ]


def _abstain_foreign(
    catalog: Catalog, source: Source, queries: Sequence[Query], mode: str
) -> float | None:
    """Share of queries for which search says nothing fits, in a catalog holding every other
    source's tools: the source's toolkit is removed for the count and registered again (its
    vectors stay in the file, so nothing is embedded twice)."""
    if not queries:
        return 0.0
    catalog.remove(source.toolkit.name)
    try:
        said = 0
        for query in queries:
            with contextlib.suppress(InvalidQueryError):
                said += catalog.search(query.text, mode=mode, k=10).no_match
    finally:
        catalog.register(source.toolkit)
    return round(said / len(queries), 4)
