"""Fit the "nothing fits" thresholds (search/fusion.py WEAK_COSINE, WEAK_COVER) on half of
each benchmark source's queries and report the other half.

A hit is ``none`` below both weak thresholds, and a search says "nothing fits" when every hit
is ``none``: so a query is summed up by two numbers, the best cosine and the best
IDF-weighted query coverage among what it retrieves. Those are read from the embedding top 10
and the BM25 top 10 (through the public search API, coverage computed as fusion.py computes
it), never from the hybrid ranking, so the fit does not depend on how hybrid fuses.

Each source's queries are looked at twice: in the source's own catalog (answerable: saying
"nothing fits" is a mistake) and in a catalog of every *other* source's tools (the realistic
case of a request nobody's tools answer; some still are answered by a like tool elsewhere, so
100% is not the goal). The fit picks the thresholds that tell "nothing fits" to the most
foreign queries while telling it to at most ``--own-budget`` of answerable ones (mean over
sources). The held-out half is then scored through ``Catalog.search(...).no_match`` in
hybrid mode with the fitted thresholds: what a user gets.

    python scripts/tune_match.py [BENCH] [--max-queries 200] [--cache vectors.db]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from toolcat import Catalog  # noqa: E402
from toolcat.evaluate import (  # noqa: E402
    Query,
    Source,
    load_source,
    reindex_with_vector_cache,
    source_folders,
)
from toolcat.search import bm25, fusion  # noqa: E402
from toolcat.search.tokenize import tokenize  # noqa: E402

COSINES = [round(0.15 + 0.01 * i, 2) for i in range(41)]  # 0.15 .. 0.55
COVERS = [round(0.4 + 0.05 * i, 2) for i in range(13)] + [1.01]  # 1.01: coverage ignored


def best_signals(catalog: Catalog, text: str) -> tuple[float, float]:
    """(best cosine, best coverage) among the embedding and BM25 top 10."""
    semantic = catalog.search(text, mode="embedding", k=10).hits
    lexical = catalog.search(text, mode="bm25", k=10).hits
    cosine = max((min(h.score, 1.0) for h in semantic), default=0.0)
    terms = list(dict.fromkeys(tokenize(text)))[: bm25.MAX_QUERY_TERMS]
    if not terms:
        return cosine, 0.0
    keys = {(h.tool.toolkit, h.tool.name) for h in [*semantic, *lexical]}
    conn = sqlite3.connect(f"file:{catalog.path}?mode=ro", uri=True)
    try:
        n_docs = conn.execute("SELECT count(*) FROM tools_fts").fetchone()[0]
        marks = ",".join("?" * len(terms))
        freq = dict(
            conn.execute(f"SELECT term, doc FROM tools_fts_vocab WHERE term IN ({marks})", terms)
        )
        weights = {t: fusion.idf(n_docs, freq.get(t, 0)) for t in terms}
        cover = 0.0
        for toolkit, name in keys:
            row = conn.execute(
                "SELECT f.name, f.hint, f.description, f.params, f.tags FROM tools_fts f "
                "JOIN tools t ON t.id = f.rowid JOIN toolkits k ON k.id = t.toolkit_id "
                "WHERE k.active = 1 AND t.toolkit = ? AND t.name = ?",
                (toolkit, name),
            ).fetchone()
            if row is not None:
                cover = max(cover, fusion.coverage(terms, weights, row)[0])
    finally:
        conn.close()
    return cosine, cover


def says_none(signals: tuple[float, float], cosine: float, cover: float) -> bool:
    return signals[0] < cosine and signals[1] < cover


def rate(rows: list[tuple[float, float]], cosine: float, cover: float) -> float:
    return sum(says_none(r, cosine, cover) for r in rows) / len(rows) if rows else 0.0


def held_out(catalog: Catalog, queries: list[Query]) -> float:
    said = sum(catalog.search(q.text, mode="hybrid", k=10).no_match for q in queries)
    return said / len(queries) if queries else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent / "shared" / "bench"))
    parser.add_argument("--max-queries", type=int, default=200)
    parser.add_argument("--own-budget", type=float, default=0.10)
    parser.add_argument("--cache", default="vectors.db", help="Vector cache file.")
    parser.add_argument("--source", action="append", default=[])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="Write the per-query signals here (JSON).")
    args = parser.parse_args()
    sources: list[Source] = [load_source(f) for f in source_folders(Path(args.bench), args.source)]
    fit: dict[str, list[Query]] = {}
    test: dict[str, list[Query]] = {}
    for source in sources:
        rng = random.Random(f"{args.seed}:{source.name}")
        sample = rng.sample(source.queries, min(args.max_queries, len(source.queries)))
        fit[source.name], test[source.name] = sample[::2], sample[1::2]
    signals: dict[str, dict[str, list[tuple[float, float]]]] = {}
    report: dict[str, dict[str, float]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        everything = Catalog(Path(tmp) / "all.db")
        everything.register(*(s.toolkit for s in sources))
        reindex_with_vector_cache(everything, Path(args.cache))
        owns: dict[str, Catalog] = {}
        for source in sources:
            own = owns[source.name] = Catalog(Path(tmp) / f"{source.toolkit.name}.db")
            own.register(source.toolkit)
            reindex_with_vector_cache(own, Path(args.cache))
            signals[source.name] = {"own": [best_signals(own, q.text) for q in fit[source.name]]}
            everything.remove(source.toolkit.name)  # every other source's tools
            try:
                signals[source.name]["foreign"] = [
                    best_signals(everything, q.text) for q in fit[source.name]
                ]
            finally:
                everything.register(source.toolkit)
            print(f"{source.name}: signals in {time.perf_counter() - started:.0f}s", flush=True)
        for source, other in zip(sources, sources[1:] + sources[:1], strict=True):
            if other is not source:  # for comparison: one other source's catalog
                signals[source.name]["paired"] = [
                    best_signals(owns[other.name], q.text) for q in fit[source.name]
                ]
        if args.out:
            Path(args.out).write_text(json.dumps(signals))
        best: tuple[float, float, float, float] | None = None
        for cosine in COSINES:
            for cover in COVERS:
                own = sum(rate(s["own"], cosine, cover) for s in signals.values()) / len(signals)
                foreign = sum(rate(s["foreign"], cosine, cover) for s in signals.values())
                foreign /= len(signals)
                if own <= args.own_budget and (best is None or foreign > best[0]):
                    best = (foreign, own, cosine, cover)
        if best is None:
            raise SystemExit("no thresholds keep 'nothing fits' within the own budget")
        print("fit half, mean over sources: own / all other sources / the next source alone")
        for cosine, cover in [(c, v) for c in (0.25, 0.3, 0.35, 0.4, 0.45) for v in (0.5, 0.7)]:
            means = [
                sum(rate(s.get(kind, []), cosine, cover) for s in signals.values()) / len(signals)
                for kind in ("own", "foreign", "paired")
            ]
            print(
                f"  cosine < {cosine:.2f}, coverage < {cover:.2f}: "
                + " / ".join(f"{m:.3f}" for m in means)
            )
        foreign, own, cosine, cover = best
        print(
            f"fitted (half of each source): WEAK_COSINE = {cosine}, WEAK_COVER = {cover} "
            f"(own {own:.3f}, foreign {foreign:.3f})"
        )
        fusion.WEAK_COSINE, fusion.WEAK_COVER = cosine, cover  # what match() reads
        print(f"{'held-out half':<14} {'queries':>7} {'own':>6} {'foreign':>8}")
        for source in sources:
            queries = test[source.name]
            own_rate = held_out(owns[source.name], queries)
            everything.remove(source.toolkit.name)
            try:
                foreign_rate = held_out(everything, queries)
            finally:
                everything.register(source.toolkit)
            report[source.name] = {"own": own_rate, "foreign": foreign_rate}
            print(f"{source.name:<14} {len(queries):>7} {own_rate:6.3f} {foreign_rate:8.3f}")
        mean_own = sum(r["own"] for r in report.values()) / len(report)
        mean_foreign = sum(r["foreign"] for r in report.values()) / len(report)
        print(f"{'mean':<14} {'':>7} {mean_own:6.3f} {mean_foreign:8.3f}")
        for catalog in [everything, *owns.values()]:
            catalog.close()


if __name__ == "__main__":
    main()
