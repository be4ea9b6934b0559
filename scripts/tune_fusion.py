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
    Candidate,
    FusionParams,
    candidates,
    fuse,
    reciprocal_rank_fusion,
    score_fusion,
)
from toolcat.search.tokenize import tokenize  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from gather_rankings import reduced  # noqa: E402

Row = dict[str, Any]
Rule = Callable[[Row], list[str]]


def prepare(
    bench: Path, data: dict[str, Any], pooled: bool, max_queries: int, max_tools: int
) -> dict[str, dict[str, Any]]:
    wanted = set(data) | {e["foreign_source"] for e in data.values() if "foreign_source" in e}
    """Per source: queries with their terms, the documents and document frequencies (of the
    catalog gather_rankings.py searched: the same reduction, the same seeds)."""
    sources = {}
    for folder in source_folders(bench):
        source = load_source(folder)
        if source.name not in wanted:
            continue
        queries = source.queries
        if len(queries) > max_queries:
            queries = random.Random(0).sample(queries, max_queries)
        sources[source.name] = reduced(source, queries, max_tools, 0)
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
    df_of = {name: frequencies(docs) for name, docs in docs_of.items()}
    for name, entry in data.items():
        docs = pooled_docs if pooled else docs_of[name]
        df = pooled_df if pooled else df_of[name]
        for q in entry["queries"] + entry.get("foreign", []):
            q["terms"] = list(dict.fromkeys(tokenize(q["text"])))[:32]
            q["sem50"] = q["sem"][:50]
        out[name] = {"queries": entry["queries"], "docs": docs, "df": df, "n": len(docs)}
        if "foreign" in entry:
            out[name]["foreign"] = entry["foreign"]
            other = entry["foreign_source"]
            out[name]["foreign_entry"] = {
                "docs": docs_of[other],
                "df": df_of[other],
                "n": len(docs_of[other]),
            }
    return out


def halves(rows: Sequence[Row], seed: int, name: str) -> tuple[list[Row], list[Row]]:
    shuffled = random.Random(f"{seed}:{name}").sample(list(rows), len(rows))
    cut = len(shuffled) // 2
    return shuffled[:cut], shuffled[cut:]


def signals(entry: dict[str, Any], q: Row) -> dict[Any, Candidate]:
    """The candidates' signals of one query (they do not depend on the parameters: computed
    once per query and catalog)."""
    key = "found" if entry.get("kind") != "foreign" else "found_foreign"
    if key not in q:
        q[key] = candidates(
            q["terms"], entry["df"], entry["n"], q["lex"], q["sem50"], entry["docs"]
        )
    return q[key]  # type: ignore[no-any-return]


def adaptive(params: FusionParams, entry: dict[str, Any]) -> Rule:
    def rank(q: Row) -> list[str]:
        fused = fuse(signals(entry, q), q["lex"], q["sem50"], 10, params)
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
    steps["cover_power"] = 1.0
    steps["spread"] = 0.4
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
    parser.add_argument("rankings", help="Comma-separated files from gather_rankings.py.")
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent.parent / "shared" / "bench"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pooled", action="store_true")
    parser.add_argument("--params", help="Comma-separated FusionParams to start from / use.")
    parser.add_argument("--no-fit", action="store_true")
    parser.add_argument("--max-queries", type=int, default=200)
    parser.add_argument("--max-tools", type=int, default=600)
    args = parser.parse_args()
    data: dict[str, Any] = {}
    for name in args.rankings.split(","):
        part = json.loads(Path(name).read_text())
        for source, entry in part.items():
            if "foreign" in entry:
                entry["foreign_source"] = next(s for s in part if s != source)
            if source not in data or "foreign" not in data[source]:
                data[source] = entry
    prepared = prepare(Path(args.bench), data, args.pooled, args.max_queries, args.max_tools)
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
    abstention(params, prepared, split)


def top_hit(entry: dict[str, Any], q: Row, params: FusionParams) -> Candidate:
    """The signals of the best hit (nothing fits is said when every hit is "none"; the best
    hit has the highest signals in practice, so it decides)."""
    found = signals(entry, q)
    fused = fuse(found, q["lex"], q["sem50"], 10, params)
    if not fused:
        return Candidate()
    return max((found[i] for i, _ in fused), key=lambda c: (c.semantic, c.cover))


def abstention(
    params: FusionParams,
    prepared: dict[str, dict[str, Any]],
    split: dict[str, tuple[list[Row], list[Row]]],
) -> None:
    """How often "nothing fits" is said on own (held-out) and foreign queries."""
    from toolcat.search.fusion import match

    def says_none(entry: dict[str, Any], q: Row) -> bool:
        found = signals(entry, q)
        fused = fuse(found, q["lex"], q["sem50"], 10, params)
        return all(match(found[i], "hybrid") == "none" for i, _ in fused)

    # Calibrate: the "none" thresholds (cosine, coverage) that say "nothing fits" on the most
    # foreign queries while saying it on at most 10% of answerable ones (mean over sources).
    import toolcat.search.fusion as fusion_module

    tops: dict[str, tuple[list[Candidate], list[Candidate]]] = {}
    for name, entry in prepared.items():
        if "foreign" not in entry:
            continue
        tops[name] = (
            [top_hit(entry, q, params) for q in split[name][1]],
            [top_hit(entry["foreign_entry"], q, params) for q in entry["foreign"]],
        )
    best = None
    for cos in [x / 100 for x in range(20, 62, 2)]:
        for cover in [x / 10 for x in range(3, 11)]:

            def none(c: Candidate, cos: float = cos, cover: float = cover) -> bool:
                return c.semantic < cos and c.cover < cover

            own = sum(sum(map(none, o)) / len(o) for o, _ in tops.values()) / len(tops)
            foreign = sum(sum(map(none, f)) / len(f) for _, f in tops.values()) / len(tops)
            if own <= 0.10 and (best is None or foreign > best[0]):
                best = (foreign, own, cos, cover)
    print(
        f"calibrated none: cosine < {best[2]} and cover < {best[3]}: own {best[1]:.2f}, "
        f"foreign {best[0]:.2f}"
        if best
        else "no calibration meets own <= .10"
    )
    if best:
        fusion_module.WEAK_COSINE, fusion_module.WEAK_COVER = best[2], best[3]
    print(f"{'nothing fits':<28} {'own':>6} {'foreign':>8}")
    for name, entry in sorted(prepared.items()):
        if "foreign" not in entry:
            continue
        own = [says_none(entry, q) for q in split[name][1]]
        foreign = [says_none(entry["foreign_entry"], q) for q in entry["foreign"]]
        print(f"{name:<28} {sum(own) / len(own):6.2f} {sum(foreign) / len(foreign):8.2f}")


if __name__ == "__main__":
    main()
