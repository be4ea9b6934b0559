"""Fit hybrid fusion's few parameters on half of each source's queries; report the other half.

Reads rankings saved by scripts/gather_rankings.py (BM25 top 50, embedding top 300 per
query), splits each source's queries in two with a seeded shuffle, fits ``FusionParams`` on
the first half (mean over sources of R@5, coordinate search from a grid) and prints R@5 per
source on the held-out half for bm25, embedding, the old min-max fusion, plain RRF and the
fitted adaptive fusion. The same ``adaptive_fusion`` runs in the search engine.

    python scripts/tune_fusion.py RANKINGS.json [--seed 0] [--params bias,name_cover,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from toolcat.evaluate import load_source, score_query, source_folders  # noqa: E402
from toolcat.search.documents import index_fields  # noqa: E402
from toolcat.search.fusion import (  # noqa: E402
    FusionParams,
    adaptive_fusion,
    reciprocal_rank_fusion,
    score_fusion,
)
from toolcat.search.tokenize import tokenize  # noqa: E402

Row = dict[str, Any]
Rule = Callable[[Row], list[str]]


def prepare(bench: Path, data: dict[str, Any], pooled: bool) -> dict[str, dict[str, Any]]:
    """Per source: queries with their terms, the documents and document frequencies."""
    sources = {s.name: s for s in (load_source(f) for f in source_folders(bench))}
    docs_of: dict[str, dict[str, tuple[str, ...]]] = {}
    for name, source in sources.items():
        prefix = f"{source.toolkit.name}." if pooled else ""
        docs_of[name] = {
            prefix + t.name: index_fields(t, source.toolkit) for t in source.toolkit.tools
        }

    def frequencies(docs: dict[str, tuple[str, ...]]) -> dict[str, int]:
        df: dict[str, int] = {}
        for columns in docs.values():
            for term in set(" ".join(columns).split()):
                df[term] = df.get(term, 0) + 1
        return df

    pooled_docs: dict[str, tuple[str, ...]] = {}
    if pooled:
        for docs in docs_of.values():
            pooled_docs.update(docs)
        pooled_df = frequencies(pooled_docs)
    out = {}
    for name, entry in data.items():
        docs = pooled_docs if pooled else docs_of[name]
        df = pooled_df if pooled else frequencies(docs)
        for q in entry["queries"]:
            q["terms"] = list(dict.fromkeys(tokenize(q["text"])))[:32]
            q["sem50"] = q["sem"][:50]
        out[name] = {"queries": entry["queries"], "docs": docs, "df": df, "n": len(docs)}
    return out


def halves(rows: Sequence[Row], seed: int, name: str) -> tuple[list[Row], list[Row]]:
    shuffled = random.Random(f"{seed}:{name}").sample(list(rows), len(rows))
    cut = len(shuffled) // 2
    return shuffled[:cut], shuffled[cut:]


def adaptive(params: FusionParams, entry: dict[str, Any]) -> Rule:
    def rank(q: Row) -> list[str]:
        fused, _ = adaptive_fusion(
            q["terms"], entry["df"], entry["n"], q["lex"], q["sem50"], entry["docs"], 10, params
        )
        return [i for i, _ in fused]  # type: ignore[misc]

    return rank


def baseline_rules() -> dict[str, Rule]:
    def ids(pairs: Sequence[tuple[Any, float]]) -> list[str]:
        return [i for i, _ in pairs]

    return {
        "bm25": lambda q: ids(q["lex"][:10]),
        "embedding": lambda q: ids(q["sem"][:10]),
        "minmax .45/.55 (old hybrid)": lambda q: ids(
            score_fusion([(0.45, q["lex"]), (0.55, q["sem50"])], 10)
        ),
        "rrf 1:1": lambda q: ids(reciprocal_rank_fusion([(1, q["lex"]), (1, q["sem50"])], 10)),
    }


def r5(rule: Rule, rows: Sequence[Row]) -> float:
    scores = [score_query(rule(q), [[n] for n in q["relevant"]]) for q in rows]
    scores = [s for s in scores if s]
    return sum(s["R@5"] for s in scores) / len(scores) if scores else 0.0


def fit(
    prepared: dict[str, dict[str, Any]], train: dict[str, list[Row]], start: FusionParams
) -> FusionParams:
    def objective(p: FusionParams) -> float:
        return sum(r5(adaptive(p, prepared[n]), rows) for n, rows in train.items()) / len(train)

    best, best_score = start, objective(start)
    steps = {f.name: 2.0 for f in dataclasses.fields(FusionParams)}
    steps["name_bonus"] = 0.2
    for _round in range(4):
        improved = False
        for field in steps:
            for sign in (1, -1):
                trial = dataclasses.replace(
                    best, **{field: getattr(best, field) + sign * steps[field]}
                )
                score = objective(trial)
                if score > best_score + 1e-6:
                    best, best_score, improved = trial, score, True
        print(f"  fit round {_round}: {best_score:.4f} {best}", flush=True)
        steps = {k: v / 2 for k, v in steps.items()}
        if not improved and _round > 1:
            break
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rankings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pooled", action="store_true")
    parser.add_argument("--params", help="Comma-separated FusionParams to start from / use.")
    parser.add_argument("--no-fit", action="store_true")
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent.parent / "shared" / "bench"))
    args = parser.parse_args()
    data = json.loads(Path(args.rankings).read_text())
    prepared = prepare(Path(args.bench), data, args.pooled)
    split = {n: halves(e["queries"], args.seed, n) for n, e in prepared.items()}
    start = FusionParams()
    if args.params:
        start = FusionParams(*(float(v) for v in args.params.split(",")))
    params = start
    if not args.no_fit:
        params = fit(prepared, {n: s[0] for n, s in split.items()}, start)
    print(f"params: {params}")
    names = sorted(prepared)
    rules = baseline_rules()
    print(f"{'held-out R@5':<28} {'mean':>6} " + " ".join(f"{n[:10]:>10}" for n in names))
    for label, make in [
        *((k, lambda e, r=r: r) for k, r in rules.items()),
        ("adaptive (fitted)", lambda e: adaptive(params, e)),
    ]:
        cells = [r5(make(prepared[n]), split[n][1]) for n in names]
        print(
            f"{label:<28} {sum(cells) / len(cells):6.3f} " + " ".join(f"{c:10.3f}" for c in cells),
            flush=True,
        )


if __name__ == "__main__":
    main()
