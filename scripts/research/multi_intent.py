"""Requests that need several tools: segmentations side by side, LOSO.

For each benchmark source, three seeded query sets: ``multi`` (queries with two or more
relevant tools), ``single`` (one relevant tool) and ``joined`` (synthetic: two or three
single-tool queries of the source joined into one request, every one of their tools gold,
with a seeded connector: a sentence end, "Also,", ", and also" or ", and"). Each is
searched in hybrid mode in the source's own catalog and in the pooled one (every source's
tools), under every variant of ``VARIANTS`` (search/split.py's segmentation), with the
shipped retriever and with the base MiniLM, beside the plain baseline (rank-bm25 + base
MiniLM + RRF k=60). Writes every query's R@5 per variant;
``--report`` reads that file and prints the tables, choosing each constant leaving the
scored source out (the variant with the best mean over the other six sources' multi and
joined queries, own and pooled, that loses no more than .005 on their single-tool ones).

    python scripts/research/multi_intent.py run OUT.json [--max-queries 100] [--model ID]...
    python scripts/research/multi_intent.py report OUT.json [MORE.json]...
    python scripts/research/multi_intent.py latency VARIANT [--cache vectors.db]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from toolcat import Catalog  # noqa: E402
from toolcat.quality.evaluate import (  # noqa: E402
    Baseline,
    Query,
    Source,
    load_source,
    reindex_with_vector_cache,
    score_query,
    source_folders,
)
from toolcat.search import engine, split  # noqa: E402
from toolcat.search.embeddings import MINILM, RETRIEVER  # noqa: E402

# name -> module settings (engine.SPLIT_REQUESTS, split.SEGMENTATION). The part merges measured
# with them (round-robin interleaving, the coverage-aware ``cover`` and ``fill``) did not carry
# over and were removed: ``git show 91b5f78:scripts/research/multi_intent.py`` and
# ``git show 91b5f78:src/toolcat/search/coverage.py`` (docs/benchmarks.md has their figures).
VARIANTS: dict[str, dict[str, Any]] = {
    "no split": {"split": False},
    "today": {},
    "clauses": {"segmentation": "clauses"},
}
CONNECTORS = (". ", " Also, ", ", and also ", ", and ")
SETS = ("multi", "single", "joined")


def apply(settings: dict[str, Any]) -> None:
    engine.SPLIT_REQUESTS = settings.get("split", True)
    split.SEGMENTATION = settings.get("segmentation", "sequencing")


def joined(queries: list[Query], count: int, rng: random.Random) -> list[Query]:
    """``count`` requests made of two or three single-tool queries with different tools."""
    singles = [q for q in queries if len(q.relevant) == 1]
    out: list[Query] = []
    for n in range(count):
        size = 2 if rng.random() < 0.6 else 3
        picked: list[Query] = []
        for q in rng.sample(singles, min(len(singles), 12)):
            if all(q.relevant[0] != p.relevant[0] for p in picked):
                picked.append(q)
            if len(picked) == size:
                break
        text = picked[0].text.strip()
        for q in picked[1:]:
            connector = rng.choice(CONNECTORS)
            nxt = q.text.strip()
            if connector.startswith(","):
                text = text.rstrip(".?! ")
                nxt = nxt[:1].lower() + nxt[1:]
            elif connector == " Also, ":
                nxt = nxt[:1].lower() + nxt[1:]
            text = text + connector + nxt
        relevant = [p.relevant[0] for p in picked]
        out.append(Query(id=f"joined-{n}", text=text, relevant=relevant, any_of=None))
    return out


def samples(source: Source, limit: int) -> dict[str, list[Query]]:
    rng = random.Random(0)
    multi = [q for q in source.queries if len(q.relevant) >= 2]
    single = [q for q in source.queries if len(q.relevant) == 1]
    return {
        "multi": rng.sample(multi, min(limit, len(multi))),
        "single": rng.sample(single, min(limit, len(single))),
        "joined": joined(source.queries, limit, random.Random(1)) if len(single) >= 6 else [],
    }


def reduced(source: Source, queries: list[Query], limit: int) -> Source:
    """The source with at most ``limit`` tools (0: all): every gold tool of ``queries``,
    then seeded others (as scripts/research/gather_rankings.py --max-tools)."""
    tools = source.toolkit.tools
    if limit <= 0 or len(tools) <= limit:
        return source
    gold = {n for q in queries for n in q.relevant}
    keep = [t for t in tools if t.name in gold]
    others = [t for t in tools if t.name not in gold]
    keep += random.Random(0).sample(others, max(0, limit - len(keep)))
    toolkit = source.toolkit.model_copy(update={"tools": keep})
    return dataclasses.replace(source, toolkit=toolkit)


def recall5(ranked: list[str], relevant: list[str]) -> float:
    return score_query(ranked, [[r] for r in relevant])["R@5"]


def run(args: argparse.Namespace) -> None:
    sources = [load_source(f) for f in source_folders(Path(args.bench), args.source)]
    sets = {s.name: samples(s, args.max_queries) for s in sources}
    sources = [
        reduced(s, [q for v in sets[s.name].values() for q in v], args.max_tools) for s in sources
    ]
    memo: dict[tuple[str, str], Any] = {}
    encode = engine.SearchEngine.encode_queries

    def cached(model_id: str, texts: list[str]) -> list[Any]:
        missing = [t for t in dict.fromkeys(texts) if (model_id, t) not in memo]
        if missing:
            memo.update(
                zip([(model_id, t) for t in missing], encode(model_id, missing), strict=True)
            )
        return [memo[(model_id, t)] for t in texts]

    engine.SearchEngine.encode_queries = staticmethod(cached)  # type: ignore[method-assign]
    out: dict[str, Any] = {"sets": {n: {k: len(v) for k, v in s.items()} for n, s in sets.items()}}
    variants = {n: VARIANTS[n] for n in (args.variant or VARIANTS)}
    baseline = Baseline()
    with tempfile.TemporaryDirectory() as tmp:
        for pooled in (False, True):
            kind = "pooled" if pooled else "own"
            for source in sources:
                started = time.perf_counter()
                for name, queries in sets[source.name].items():
                    if not queries or args.no_baseline:
                        continue
                    scope = sources if pooled else [source]
                    ranked = baseline_rankings(baseline, source, queries, scope, pooled)
                    out.setdefault("rrf", {}).setdefault(kind, {}).setdefault(source.name, {})[
                        name
                    ] = [
                        recall5(r, gold(source, q, pooled))
                        for r, q in zip(ranked, queries, strict=True)
                    ]
                print(f"baseline {kind} {source.name} {time.perf_counter() - started:.0f}s")
        for model in args.model or [RETRIEVER, MINILM]:
            for pooled in (False, True):
                kind = "pooled" if pooled else "own"
                groups = [sources] if pooled else [[s] for s in sources]
                for group in groups:
                    path = Path(tmp) / f"{kind}-{group[0].name}-{model}.db"
                    with Catalog(path, embedding_model=model) as catalog:
                        catalog.register(*(s.toolkit for s in group))
                        reindex_with_vector_cache(catalog, args.cache)
                        targets = sources if pooled else group
                        for source in targets:
                            started = time.perf_counter()
                            for variant, settings in variants.items():
                                apply(settings)
                                for name, queries in sets[source.name].items():
                                    scores = []
                                    for q in queries:
                                        hits = catalog.search(q.text, mode="hybrid", k=10).hits
                                        ids = [h.tool.id if pooled else h.tool.name for h in hits]
                                        scores.append(recall5(ids, gold(source, q, pooled)))
                                    at = out.setdefault(model, {}).setdefault(kind, {})
                                    at.setdefault(source.name, {}).setdefault(name, {})[variant] = (
                                        scores
                                    )
                            took = time.perf_counter() - started
                            print(f"{model} {kind} {source.name} {took:.0f}s", flush=True)
                            Path(args.out).write_text(json.dumps(out))
    apply({})
    Path(args.out).write_text(json.dumps(out))


def gold(source: Source, query: Query, pooled: bool) -> list[str]:
    prefix = f"{source.toolkit.name}." if pooled else ""
    return [prefix + r for r in query.relevant]


def baseline_rankings(
    baseline: Baseline, source: Source, queries: list[Query], scope: list[Source], pooled: bool
) -> list[list[str]]:
    from toolcat.quality import baseline as plain

    documents = {
        (f"{s.toolkit.name}.{t.name}" if pooled else t.name): plain.plain_text(t)
        for s in scope
        for t in s.toolkit.tools
    }
    names = list(documents)
    key = (pooled, source.name if not pooled else "")
    cache = baseline.__dict__.setdefault("_indexes", {})
    if key not in cache:
        cache[key] = (plain.PlainBM25(documents), baseline.encode([documents[n] for n in names]))
    bm25, matrix = cache[key]
    vectors = baseline.encode([q.text for q in queries])
    return [
        plain.rrf([bm25.rank(q.text, 50), plain.dense_rank(v, names, matrix, 50)], 10)
        for q, v in zip(queries, vectors, strict=True)
    ]


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def merged(into: dict[str, Any], more: dict[str, Any]) -> None:
    """``more``'s results added to ``into``'s, down to each variant's list."""
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merged(into[key], value)
        else:
            into[key] = value


def report(args: argparse.Namespace) -> None:
    data: dict[str, Any] = {}
    for path in args.out:  # one file per model or per set of variants, and the baseline's
        merged(data, json.loads(Path(path).read_text()))
    models = [m for m in data if m not in ("sets", "rrf")]
    for model in models:
        by = data[model]
        sources = list(by["own"])
        variants = list(next(iter(by["own"].values()))["multi"])

        def score(
            variant: str, names: list[str], sets: tuple[str, ...], by: dict[str, Any] = by
        ) -> float:
            values = [
                mean(by[kind][s][n][variant])
                for kind in ("own", "pooled")
                for s in names
                for n in sets
                if by[kind].get(s, {}).get(n) and by[kind][s][n].get(variant)
            ]
            return mean(values)

        print(f"\n## {model}\n")
        print(
            "| variant | " + " | ".join(f"{k} {n}" for k in ("own", "pooled") for n in SETS) + " |"
        )
        print("|---|" + "---|" * 6)
        rows = ["rrf", *variants] if "rrf" in data else variants
        for variant in rows:
            cells = []
            for kind in ("own", "pooled"):
                for n in SETS:
                    table = data["rrf"] if variant == "rrf" else None
                    values = []
                    for s in sources:
                        at = table if table else by
                        got = at[kind].get(s, {}).get(n)
                        got = got if table else (got or {}).get(variant)
                        if got:
                            values.append(mean(got))
                    cells.append(f"{mean(values):.3f}")
            print(f"| {variant} | " + " | ".join(cells) + " |")
        # LOSO: choose the variant on six sources, score the seventh.
        print("\nLOSO (best multi+joined on the other six; their single within -.005 of today)\n")
        print(
            "| held out | chosen | "
            + " | ".join(f"{k} {n}" for k in ("own", "pooled") for n in SETS)
            + " |"
        )
        print("|---|---|" + "---|" * 6)
        held_out: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        for held in sources:
            others = [s for s in sources if s != held]
            today_single = score("today", others, ("single",))
            allowed = [v for v in variants if score(v, others, ("single",)) >= today_single - 0.005]
            chosen = max(allowed, key=lambda v: score(v, others, ("multi", "joined")))
            cells = []
            for kind in ("own", "pooled"):
                for n in SETS:
                    got = by[kind].get(held, {}).get(n, {})
                    if not got:
                        cells.append("–")
                        continue
                    rrf = mean(data.get("rrf", {}).get(kind, {}).get(held, {}).get(n) or [])
                    c, t = mean(got[chosen]), mean(got["today"])
                    cells.append(f"{c:.3f} ({c - t:+.3f} today, {c - rrf:+.3f} rrf)")
            print(f"| {held} | {chosen} | " + " | ".join(cells) + " |")
            for kind in ("own", "pooled"):
                for n in SETS:
                    got = by[kind].get(held, {}).get(n, {})
                    if got.get(chosen):
                        held_out.setdefault((kind, n), []).append(
                            (
                                mean(got[chosen]),
                                mean(got["today"]),
                                mean(data.get("rrf", {}).get(kind, {}).get(held, {}).get(n) or []),
                            )
                        )
        cells = []
        for kind in ("own", "pooled"):
            for n in SETS:
                rows_ = held_out.get((kind, n), [])
                c, t, r = (mean([row[i] for row in rows_]) for i in range(3))
                cells.append(f"{c:.3f} ({c - t:+.3f} today, {c - r:+.3f} rrf)")
        print("| mean (held out) | | " + " | ".join(cells) + " |")


def latency(args: argparse.Namespace) -> None:
    """Warm hybrid search, ``today`` against ``args.variant`` alternated query by query, the
    query cache emptied before each search (the request and its parts encoded every time):
    the benchmark's single-tool queries, then its multi-tool and joined ones. In the pooled
    catalog, or in ``--db`` (a copy of a catalog that has vectors)."""
    sources = [load_source(f) for f in source_folders(Path(args.bench))]
    sets = {s.name: samples(s, args.max_queries) for s in sources}
    sources = [
        reduced(s, [q for v in sets[s.name].values() for q in v], args.max_tools) for s in sources
    ]
    model = args.model or RETRIEVER
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "catalog.db"
        if args.db:
            shutil.copy(args.db, path)
        with Catalog(path, embedding_model=model) as catalog:
            if not args.db:
                catalog.register(*(s.toolkit for s in sources))
                reindex_with_vector_cache(catalog, args.cache)
            _latency(catalog, sets, model, args)


def _latency(
    catalog: Catalog, sets: dict[str, dict[str, list[Query]]], model: str, args: argparse.Namespace
) -> None:
    import statistics

    from toolcat.search.embeddings import embedder

    variants = ["today", args.variant]
    for q in [q for s in sets.values() for q in s["single"]][:50]:
        catalog.search(q.text, mode="hybrid", k=10)  # warm: matrix, postings, session
    for kind in ("single", "multi+joined"):
        names = ("single",) if kind == "single" else ("multi", "joined")
        queries = [q for s in sets.values() for n in names for q in s[n]]
        timings: dict[str, list[float]] = {v: [] for v in variants}
        split_share = {v: 0 for v in variants}
        for round_ in range(args.rounds):
            for i, q in enumerate(queries):
                order = variants if (i + round_) % 2 == 0 else variants[::-1]
                for variant in order:
                    apply(VARIANTS[variant])
                    split_share[variant] += bool(split.split_request(q.text))
                    embedder(model)._queries.clear()
                    started = time.perf_counter()
                    catalog.search(q.text, mode="hybrid", k=10)
                    timings[variant].append(time.perf_counter() - started)
        apply({})
        for variant in variants:
            t = sorted(timings[variant])
            print(
                f"{kind} {variant}: n {len(t)} split {split_share[variant] / len(t):.2f} "
                f"p50 {1000 * statistics.median(t):.2f} ms "
                f"p90 {1000 * t[int(0.9 * len(t))]:.2f} ms "
                f"mean {1000 * statistics.mean(t):.2f} ms"
            )
        ratio = statistics.median(timings[args.variant]) / statistics.median(timings["today"])
        print(f"{kind}: p50 ratio {args.variant} / today {ratio:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--bench", default=str(ROOT.parent / "shared" / "bench"))
    r.add_argument("--max-queries", type=int, default=100)
    r.add_argument("--max-tools", type=int, default=0, help="Cut each source's catalog.")
    r.add_argument("--model", action="append", default=[])
    r.add_argument("--source", action="append", default=[])
    r.add_argument("--variant", action="append", default=[])
    r.add_argument("--cache", default="vectors.db")
    r.add_argument("--no-baseline", action="store_true")
    p = sub.add_parser("report")
    p.add_argument("out", nargs="+")
    t = sub.add_parser("latency")
    t.add_argument("variant")
    t.add_argument("--bench", default=str(ROOT.parent / "shared" / "bench"))
    t.add_argument("--max-queries", type=int, default=40)
    t.add_argument("--rounds", type=int, default=2)
    t.add_argument("--model", default="")
    t.add_argument("--max-tools", type=int, default=0)
    t.add_argument("--db", help="Time a copy of this catalog (with vectors) instead.")
    t.add_argument("--cache", default="vectors.db")
    args = parser.parse_args()
    {"run": run, "report": report, "latency": latency}[args.command](args)


if __name__ == "__main__":
    main()
