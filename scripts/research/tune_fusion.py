"""Choose hybrid fusion's few parameters on half of each source's queries; report the other half.

Reads the rankings scripts/research/gather_rankings.py saved (BM25 top 50, embedding top hits, for
each request and each of its parts, in each source's own catalog and in the pooled one, with
every catalog's FTS5 columns), splits each source's queries in two with a seeded shuffle,
picks ``HybridParams`` from a small grid by the mean R@5 over sources, own and pooled
catalogs, on the first half, and prints R@5 per source on the held-out half (and on its
queries with two or more relevant tools) for bm25, embedding, the former default (min-max
0.45/0.55, every part's best tool joins) and the chosen fusion. Fusion runs through
``fusion.hybrid_fusion`` and ``split.merge``/``split.fits``, as in the search engine.

    python scripts/research/tune_fusion.py RANKINGS.json [--small SMALL.json] [--seed 0] [--no-fit]

With ``--small`` (from ``gather_rankings.py SMALL.json --small``) the fit keeps the settings
that rank the most small-catalog cases right, and the best mean R@5 among those.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from toolcat.quality.evaluate import score_query  # noqa: E402
from toolcat.search import split  # noqa: E402
from toolcat.search.fusion import (  # noqa: E402
    HYBRID_PARAMS,
    HybridParams,
    fts_document,
    hybrid_fusion,
    lift_part_tops,
    score_fusion,
)
from toolcat.text.tokenize import tokenize  # noqa: E402

DEPTH = 50  # engine.HYBRID_DEPTH
Row = dict[str, Any]
Rule = Callable[[Row], list[int]]


class Catalog:
    """One catalog's documents as the engine sees them: row ids, FTS5 columns, frequencies."""

    def __init__(self, docs: dict[str, list[str]]) -> None:
        self.ids = {key: i for i, key in enumerate(docs)}
        self.keys = list(docs)
        self.columns = {self.ids[k]: tuple(v) for k, v in docs.items()}
        self.df: dict[str, int] = {}
        for columns in docs.values():
            for term in set(" ".join(columns).split()):
                self.df[term] = self.df.get(term, 0) + 1
        self.n = len(docs)

    def ranking(self, pairs: Sequence[Sequence[Any]]) -> list[tuple[int, float]]:
        return [(self.ids[key], float(score)) for key, score in pairs]


def prepare(catalog: Catalog, text: str, lex: Any, sem: Any) -> Row:
    terms = list(dict.fromkeys(tokenize(text)))[:32]
    lexical = catalog.ranking(lex)[:DEPTH]
    semantic = catalog.ranking(sem)[:DEPTH]
    ids = {i for i, _ in lexical} | {i for i, _ in semantic}
    documents = {i: fts_document(catalog.columns[i], terms) for i in ids}
    names = {t for i in ids for t in catalog.columns[i][0].split()}
    doc_freq = {t: catalog.df.get(t, 0) for t in [*terms, *names]}
    return {
        "terms": terms,
        "lexical": lexical,
        "semantic": semantic,
        "documents": documents,
        "doc_freq": doc_freq,
        "n": catalog.n,
    }


def load(path: Path) -> dict[str, dict[str, list[Row]]]:
    """{"own" | "pooled": {source: [query rows]}}; a row holds the relevant row ids and the
    prepared request and parts."""
    data = json.loads(path.read_text())
    pooled_catalog = Catalog(data["pooled_docs"]) if data.get("pooled_docs") else None
    out: dict[str, dict[str, list[Row]]] = {}
    for setting in ("own", "pooled"):
        out[setting] = {}
        for name, entry in data.get(setting, {}).items():
            catalog = pooled_catalog if setting == "pooled" else Catalog(entry["docs"])
            assert catalog is not None
            rows = []
            for q in entry["queries"]:
                row = prepare(catalog, q["text"], q["lex"], q["sem"])
                row["id"] = q["id"]
                row["relevant"] = [catalog.ids.get(n, -1) for n in q["relevant"]]
                row["parts"] = [prepare(catalog, p["text"], p["lex"], p["sem"]) for p in q["parts"]]
                rows.append(row)
            out[setting][name] = rows
    return out


def halves(rows: Sequence[Row], seed: int, name: str) -> tuple[list[Row], list[Row]]:
    shuffled = random.Random(f"{seed}:{name}").sample(list(rows), len(rows))
    cut = len(shuffled) // 2
    return shuffled[:cut], shuffled[cut:]


def fused(params: HybridParams, q: Row, limit: int) -> tuple[list[tuple[int, float]], Any]:
    return hybrid_fusion(
        q["terms"],
        q["doc_freq"],
        q["n"],
        q["lexical"],
        q["semantic"],
        q["documents"],
        DEPTH,
        limit,
        params,
    )


def new_rule(params: HybridParams) -> Rule:
    """What hybrid search does: fuse the request, lift each part's best tool in it, let in
    each part's best tool that fits."""

    def rank(q: Row) -> list[int]:
        whole, candidates = fused(params, q, 10)
        per_part, tops = [], []
        for part in q["parts"]:
            found, signals = fused(params, part, 1)
            if not found:
                continue
            tops.append(found[0][0])
            if split.fits(signals[found[0][0]].semantic, signals[found[0][0]].cover):
                per_part.append(found)
        if tops:
            whole = lift_part_tops(candidates, tops, 10, params)
        return [i for i, _ in split.merge(whole, per_part, 10)]

    return rank


def old_rule(q: Row) -> list[int]:
    """The former default: min-max 0.45/0.55, every part's best tool joins."""

    def minmax(row: Row, limit: int) -> list[tuple[int, float]]:
        return score_fusion([(0.45, row["lexical"]), (0.55, row["semantic"])], limit)

    parts = [minmax(p, 1) for p in q["parts"]]
    return [i for i, _ in split.merge(minmax(q, 10), parts, 10)]


def recall5(ranking: Sequence[int], q: Row) -> float:
    """Strict R@5 of one query's ranking (row ids, best first)."""
    return score_query(ranking, [[g] for g in q["relevant"]])["R@5"]


def r5(rule: Rule, rows: Sequence[Row], multi: bool = False) -> float:
    chosen = [q for q in rows if not multi or len(q["relevant"]) >= 2]
    if not chosen:
        return float("nan")
    return sum(recall5(rule(q), q) for q in chosen) / len(chosen)


def small_misses(params: HybridParams, small: dict[str, list[Row]]) -> list[str]:
    rule = new_rule(params)
    return [q["id"] for rows in small.values() for q in rows if rule(q)[:1] != q["relevant"]]


def fit(
    data: dict[str, dict[str, list[Row]]], small: dict[str, list[Row]], seed: int
) -> HybridParams:
    best: tuple[int, float, HybridParams] | None = None
    grid = itertools.product((0.45, 0.5, 0.6, 0.7), (1.0, 2.0, 3.0), (0.0, 0.1, 0.2, 0.3))
    for weight, power, bonus in grid:
        params = dataclasses.replace(
            HYBRID_PARAMS, lexical_weight=weight, visibility_power=power, name_bonus=bonus
        )
        cells = [
            r5(new_rule(params), halves(rows, seed, name)[0])
            for sources in data.values()
            for name, rows in sources.items()
        ]
        score = sum(cells) / len(cells)
        missed = len(small_misses(params, small))
        print(f"  {params}: {score:.4f}, small-catalog cases missed {missed}", flush=True)
        if best is None or (-missed, score) > (best[0], best[1]):
            best = (-missed, score, params)
    assert best is not None
    return best[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rankings", help="A file from gather_rankings.py.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-fit", action="store_true", help="Report the shipped parameters.")
    parser.add_argument("--small", help="Small-catalog cases from gather_rankings.py --small.")
    args = parser.parse_args()
    data = load(Path(args.rankings))
    small = load(Path(args.small))["own"] if args.small else {}
    params = HYBRID_PARAMS if args.no_fit else fit(data, small, args.seed)
    print(f"params: {dataclasses.asdict(params)}")
    if small:
        print(f"small-catalog cases missed: {small_misses(params, small) or 'none'}")
    rules: list[tuple[str, Rule]] = [
        ("bm25", lambda q: [i for i, _ in q["lexical"][:10]]),
        ("embedding", lambda q: [i for i, _ in q["semantic"][:10]]),
        ("min-max .45/.55 + split (old)", old_rule),
        ("hybrid_fusion + split", new_rule(params)),
    ]
    for setting, sources in data.items():
        names = sorted(sources)
        for multi in (False, True):
            what = "multi-tool queries" if multi else "R@5"
            print(f"\n{setting}, held-out half, {what}")
            print(f"{'':<32} {'mean':>6} " + " ".join(f"{n[:10]:>10}" for n in names))
            for label, rule in rules:
                cells = [r5(rule, halves(sources[n], args.seed, n)[1], multi) for n in names]
                valid = [c for c in cells if c == c]
                print(
                    f"{label:<32} {sum(valid) / len(valid):6.3f} "
                    + " ".join(f"{c:10.3f}" for c in cells),
                    flush=True,
                )


if __name__ == "__main__":
    main()
