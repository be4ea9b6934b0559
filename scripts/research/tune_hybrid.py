"""Choose how hybrid search fuses BM25 and embeddings, by measurement.

For a seeded sample of queries per source, fetch the top 50 of ``bm25`` and of
``embedding`` through the public search API once, then score fusion rules on those lists:
weighted reciprocal rank fusion, and min-max normalised score fusion. Prints mean and
per-source R@5 and nDCG@10 for each rule; the default in catalog.py came from here.

    python scripts/research/tune_hybrid.py [--max-queries 300] [--pooled]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from toolcat import Catalog  # noqa: E402
from toolcat.quality.evaluate import load_source, score_query, source_folders  # noqa: E402
from toolcat.search.fusion import reciprocal_rank_fusion, score_fusion  # noqa: E402

Ranking = list[tuple[str, float]]
Fuse = Callable[[Ranking, Ranking], list[str]]


def rrf(w_bm25: float, w_emb: float, k: int = 60) -> Fuse:
    def fuse(lexical: Ranking, semantic: Ranking) -> list[str]:
        ids = {name: i for i, (name, _) in enumerate(lexical + semantic)}
        back = {i: name for name, i in ids.items()}
        fused = reciprocal_rank_fusion(
            [
                (w_bm25, [(ids[n], s) for n, s in lexical]),
                (w_emb, [(ids[n], s) for n, s in semantic]),
            ],
            10,
            k,
        )
        return [back[i] for i, _ in fused]

    return fuse


def scores(alpha: float) -> Fuse:
    def fuse(lexical: Ranking, semantic: Ranking) -> list[str]:
        ids = {name: i for i, (name, _) in enumerate(lexical + semantic)}
        back = {i: name for name, i in ids.items()}
        fused = score_fusion(
            [
                (alpha, [(ids[n], s) for n, s in lexical]),
                (1 - alpha, [(ids[n], s) for n, s in semantic]),
            ],
            10,
        )
        return [back[i] for i, _ in fused]

    return fuse


def max_norm(alpha: float) -> Fuse:
    """Scores divided by each list's best (no shift): a weak best hit stays weak."""

    def fuse(lexical: Ranking, semantic: Ranking) -> list[str]:
        fused: dict[str, float] = {}
        for weight, ranking in ((alpha, lexical), (1 - alpha, semantic)):
            top = max((s for _, s in ranking), default=0.0) or 1.0
            for name, score in ranking:
                fused[name] = fused.get(name, 0.0) + weight * score / top
        return [n for n, _ in sorted(fused.items(), key=lambda p: -p[1])[:10]]

    return fuse


RULES: dict[str, Fuse] = {
    "bm25 only": lambda lex, sem: [n for n, _ in lex[:10]],
    "embedding only": lambda lex, sem: [n for n, _ in sem[:10]],
    "rrf 1:1": rrf(1, 1),
    "rrf 1:2": rrf(1, 2),
    "rrf 2:1": rrf(2, 1),
    "rrf 1:1 k=20": rrf(1, 1, 20),
    "scores a=0.3": scores(0.3),
    "scores a=0.4": scores(0.4),
    "scores a=0.5": scores(0.5),
    "scores a=0.6": scores(0.6),
    "scores a=0.45": scores(0.45),
    "maxnorm a=0.5": max_norm(0.5),
    "maxnorm a=0.6": max_norm(0.6),
    "maxnorm a=0.7": max_norm(0.7),
}


def gather(catalog: Catalog, prefix: str, texts: Sequence[str]) -> list[tuple[Ranking, Ranking]]:
    out = []
    for text in texts:
        lists = []
        for mode in ("bm25", "embedding"):
            hits = catalog.search(text, mode=mode, k=50).hits
            lists.append([(h.tool.id if prefix else h.tool.name, h.score) for h in hits])
        out.append((lists[0], lists[1]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-queries", type=int, default=300)
    parser.add_argument("--pooled", action="store_true")
    parser.add_argument("--cache", help="Keep the fetched rankings in this file, reuse them.")
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent / "shared" / "bench"))
    args = parser.parse_args()
    sources = [load_source(f) for f in source_folders(Path(args.bench))]
    table: dict[str, dict[str, tuple[float, float]]] = {rule: {} for rule in RULES}
    cached: dict[str, Any] = {}
    if args.cache and Path(args.cache).exists():
        cached = json.loads(Path(args.cache).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        pooled = None
        if args.pooled and len(cached) < len(sources):
            pooled = Catalog(Path(tmp) / "pooled.db")
            pooled.register(*(s.toolkit for s in sources))
            pooled.reindex()
        for source in sources:
            queries = source.queries
            if len(queries) > args.max_queries:
                queries = random.Random(0).sample(queries, args.max_queries)
            prefix = f"{source.toolkit.name}." if args.pooled else ""
            catalog = None
            if source.name in cached:
                lists = cached[source.name]
            else:
                if pooled is None:
                    catalog = Catalog(Path(tmp) / f"{source.toolkit.name}.db")
                    catalog.register(source.toolkit)
                    catalog.reindex()
                lists = gather(catalog or pooled, prefix, [q.text for q in queries])  # type: ignore[arg-type]
                cached[source.name] = lists
            for rule, fuse in RULES.items():
                rows = [
                    score_query(fuse(lex, sem), [[prefix + n] for n in q.relevant])
                    for (lex, sem), q in zip(lists, queries, strict=True)
                ]
                rows = [r for r in rows if r]
                table[rule][source.name] = (
                    sum(r["R@5"] for r in rows) / len(rows),
                    sum(r["nDCG@10"] for r in rows) / len(rows),
                )
            if catalog is not None:
                catalog.close()
        if pooled is not None:
            pooled.close()
    if args.cache:
        Path(args.cache).write_text(json.dumps(cached))
    names = [s.name for s in sources]
    print(f"{'rule':<16} {'mean R@5':>8} {'nDCG':>6}  " + " ".join(f"{n[:9]:>13}" for n in names))
    for rule, per in table.items():
        r5 = sum(v[0] for v in per.values()) / len(per)
        nd = sum(v[1] for v in per.values()) / len(per)
        cells = " ".join(f"{per[n][0]:.3f}/{per[n][1]:.3f}" for n in names)
        print(f"{rule:<16} {r5:8.4f} {nd:6.4f}  {cells}", flush=True)


if __name__ == "__main__":
    main()
