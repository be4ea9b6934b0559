"""Fit the re-scoring terms of hybrid fusion on half of each source's queries; report the other
half, and each source left out of the fit.

``fusion.hybrid_fusion`` adds to each candidate's fused score ``cosine_weight · cosine +
cosine_cover_weight · cosine · coverage``, and ``fusion.lift_part_tops`` adds ``part_bonus`` to
each part's best tool (``HybridParams``). This script fits those three weights, with the first
three ``HybridParams`` (scripts/research/tune_fusion.py) held fixed, by a pairwise logistic
(RankNet, linear): for every query of the training half, every (gold, other) pair of its
candidates (the union of the BM25 and embedding top 50) should score gold higher. Each source
counts alike in each catalog (own and pooled), the small-catalog cases of
tests/search/test_fusion.py count as ``--small-weight`` sources, and an L2 penalty keeps the
weights near zero (the fusion before). Part tops depend on the weights (a part is ranked by the
same fusion), so the fit is redone three times, each time with the tops of the last.

It reports held-out R@5 per source, own and pooled catalogs, through ``tune_fusion.new_rule``
(the engine's path: ``hybrid_fusion``, ``lift_part_tops``, ``split.merge``), before (the three
weights zero) and after, then the same with each source left out of the fit in turn (fitted on
the other six's training halves, scored on its held-out half).

    python scripts/research/tune_rerank.py RANKINGS.json --small SMALL.json [--seed 0] [--no-loso]

(RANKINGS.json and SMALL.json from scripts/research/gather_rankings.py, as for tune_fusion.py.)

``--vectors V.npz`` (``gather_rankings.py --vectors``) measures candidate signals the engine
does not have (``SIGNALS``) instead: each is added to the three fitted terms in turn, then all
together, refitted the same way, and reported on the held-out half (R@5, R@1, multi-tool R@5,
own and pooled catalogs) against the three terms refitted alone:

    python scripts/research/tune_rerank.py RANKINGS.json --small SMALL.json --vectors V.npz
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tune_fusion import fused, halves, load, new_rule, r5, small_misses  # noqa: I001

from toolcat.quality.evaluate import score_query
from toolcat.search import split
from toolcat.search.fusion import HYBRID_PARAMS, HybridParams

Row = dict[str, Any]
# The fusion before the fitted terms: what each candidate's features are measured against.
BASE = dataclasses.replace(
    HYBRID_PARAMS, cosine_weight=0.0, cosine_cover_weight=0.0, part_bonus=0.0
)
FEATURES = ("fused", "cosine_weight", "cosine_cover_weight", "part_bonus")
ROUNDS = 3  # refits, each with the part tops of the last


@dataclasses.dataclass
class Query:
    """One request's candidates: ids, features (fused, cosine, cosine x coverage, part top),
    which are gold, how many gold tools it has, and its parts' candidates (for their tops)."""

    ids: list[int]
    x: Any  # (candidates, 4)
    gold: Any  # (candidates,) bool
    n_gold: int
    parts: list[tuple[list[int], Any]]
    # each part's (cosine, coverage) per candidate, for split.fits (--vectors)
    part_fits: list[dict[int, tuple[float, float]]] = dataclasses.field(default_factory=list)
    relevant: list[int] = dataclasses.field(default_factory=list)  # as listed (repeats too)


def candidates(q: Row) -> tuple[list[int], Any]:
    _, found = fused(BASE, q, 1)
    ids = sorted(found)
    x = np.array(
        [[found[i].fused, found[i].semantic, found[i].semantic * found[i].cover, 0.0] for i in ids]
    ).reshape(len(ids), len(FEATURES))
    if "space" in q and ids:  # --vectors: the candidate signals too
        x = np.hstack([x, signals(q, ids, x)])
    return ids, x


# Signals measured with --vectors (none pays: README, "Hybrid fusion"). Pseudo-relevance
# feedback reads the first FEEDBACK_TOP candidates as the fitted fusion ranks them.
SIGNALS = (
    "prf",
    "name_cosine",
    "expansion",
    "bigram",
    "description_cover",
    "params_cover",
    "density",
)
NEIGHBOURS = 10  # density: the mean cosine of a tool to its nearest other tools
FEEDBACK_TOP = 3
EXPANSION_TERMS = 10


def signals(q: Row, ids: list[int], x: Any) -> Any:
    """Per candidate: cosine to the mean vector of the first fused hits (Rocchio feedback as a
    feature); the query's cosine to the tool's name alone (a vector of its name as words); the
    IDF share of the first hits' ten best other terms it holds (RM3-style expansion); the
    share of the query's adjacent term pairs it holds adjacent (sequential dependence); the
    IDF share of the query in its description column, and in its parameters column."""
    from toolcat.search.fusion import HYBRID_PARAMS as SHIPPED
    from toolcat.search.fusion import idf

    space, catalog = q["space"], q["catalog"]
    weights = np.array([1.0, SHIPPED.cosine_weight, SHIPPED.cosine_cover_weight])
    first = [ids[i] for i in np.lexsort((np.array(ids), -(x[:, :3] @ weights)))[:FEEDBACK_TOP]]
    centroid = space.matrix[first].mean(0)
    prf = space.matrix[ids] @ (centroid / (np.linalg.norm(centroid) + 1e-9))
    names = space.names[ids] @ q["vector"]
    terms = q["terms"]
    gain: dict[str, float] = {}
    for rank, i in enumerate(first):
        for term in set(" ".join(catalog.columns[i][:4]).split()) - set(terms):
            gain[term] = gain.get(term, 0.0) + idf(catalog.n, catalog.df.get(term, 1)) / (rank + 1)
    expansion = sorted(gain.items(), key=lambda p: (-p[1], p[0]))[:EXPANSION_TERMS]
    pairs = list(itertools.pairwise(terms))
    w = {t: idf(catalog.n, catalog.df.get(t, 0)) for t in terms}
    total = sum(w.values()) or 1.0

    def share(items: Any, text: str) -> float:
        return sum(v for t, v in items if f" {t} " in text)

    rows = []
    for i in ids:
        columns = catalog.columns[i]
        text = f" {' '.join(columns[:4])} "
        rows.append(
            [
                share(expansion, text) / (sum(v for _, v in expansion) or 1.0),
                sum(f" {a} {b} " in text for a, b in pairs) / len(pairs) if pairs else 0.0,
                share(w.items(), f" {columns[2]} ") / total,
                share(w.items(), f" {columns[3]} ") / total,
            ]
        )
    return np.column_stack([prf, names, np.array(rows).reshape(len(ids), 4), space.density[ids]])


def density(matrix: Any) -> Any:
    """Each tool's mean cosine to its ``NEIGHBOURS`` nearest other tools (hubness: a tool in
    a crowded region is close to many requests without answering them)."""
    out = np.zeros(len(matrix), dtype=np.float32)
    k = min(NEIGHBOURS, len(matrix) - 1)
    for start in range(0, len(matrix), 1024):
        block = matrix[start : start + 1024] @ matrix.T
        block[np.arange(len(block)), np.arange(start, start + len(block))] = -np.inf
        out[start : start + len(block)] = np.sort(np.partition(block, -k, axis=1)[:, -k:]).mean(1)
    return out


def prepare(q: Row) -> Query:
    ids, x = candidates(q)
    relevant = set(q["relevant"])
    gold = np.array([i in relevant for i in ids], dtype=bool)
    fits = [{i: (c.semantic, c.cover) for i, c in fused(BASE, p, 1)[1].items()} for p in q["parts"]]
    return Query(
        ids,
        x,
        gold,
        len(q["relevant"]),
        [candidates(p) for p in q["parts"]],
        fits,
        list(q["relevant"]),
    )


def set_part_tops(queries: Sequence[Query], w: Any) -> None:
    """Mark each query's candidates that are the best tool of one of its parts under ``w``."""
    for q in queries:
        tops = set()
        for ids, x in q.parts:
            if ids:
                scores = x @ np.where(np.arange(len(w)) == 3, 0.0, w)
                tops.add(ids[int(np.lexsort((np.array(ids), -scores))[0])])
        q.x[:, 3] = [float(i in tops) for i in q.ids]


def pairs(groups: Sequence[tuple[float, Sequence[Query]]]) -> tuple[Any, Any]:
    """(gold minus other feature differences, their weights): each group (a source in a
    catalog) weighs ``weight``, shared by its queries, each query's by its pairs."""
    diffs, weights = [], []
    for weight, queries in groups:
        for q in queries:
            gold, other = q.x[q.gold], q.x[~q.gold]
            if not len(gold) or not len(other):
                continue
            d = (gold[:, None, :] - other[None, :, :]).reshape(-1, q.x.shape[1])
            diffs.append(d)
            weights.append(np.full(len(d), weight / len(queries) / len(d)))
    w = np.concatenate(weights)
    return np.concatenate(diffs), w / w.sum()


def logistic(d: Any, pw: Any, l2: float) -> Any:
    """Minimise sum(pw * log(1 + exp(-d @ v))) + l2 * |v - v0|^2 (Newton's method), v0 the
    fusion before at the scale the data likes best; returns v divided by its fused weight."""

    def loss(v: Any) -> float:
        return float((pw * np.logaddexp(0, -(d @ v))).sum())

    base = np.eye(d.shape[1])[0]
    v0 = base * min((1, 2, 5, 10, 20, 50), key=lambda s: loss(base * s))
    v = v0.copy()
    for _ in range(100):
        m = d @ v
        p = 0.5 * (1 - np.tanh(m / 2))  # 1 / (1 + e^m)
        grad = -(d * (pw * p)[:, None]).sum(0) + 2 * l2 * (v - v0)
        hess = (d * (pw * p * (1 - p))[:, None]).T @ d + 2 * l2 * np.eye(len(v))
        step = np.linalg.solve(hess, grad)
        v -= step
        if np.abs(step).max() < 1e-10:
            break
    return v / v[0]


def fit(groups: Sequence[tuple[float, Sequence[Query]]], l2: float) -> HybridParams:
    w = np.array([1.0, 0.0, 0.0, 0.0])
    every = [q for _, queries in groups for q in queries]
    for _ in range(ROUNDS):
        set_part_tops(every, w)
        w = logistic(*pairs(groups), l2)
    return dataclasses.replace(
        HYBRID_PARAMS,
        **{name: round(float(v), 3) for name, v in zip(FEATURES[1:], w[1:], strict=True)},
    )


def fit_columns(
    groups: Sequence[tuple[float, Sequence[Query]]], l2: float, columns: Sequence[int]
) -> Any:
    """``fit`` with the candidate signals: the weights of ``columns`` (the first is the
    fused score, 1), every other column 0."""
    every = [q for _, queries in groups for q in queries]
    w = np.eye(every[0].x.shape[1])[0]
    for _ in range(ROUNDS):
        set_part_tops(every, w)
        d, pw = pairs(groups)
        w = np.zeros_like(w)
        w[list(columns)] = logistic(d[:, list(columns)], pw, l2)
    return w


def scored_rank(q: Query, w: Any) -> list[int]:
    """``new_rule`` on the prepared candidates, each scored ``x @ w``: each part's best tool
    lifted by the part-top weight to just below the first hit, the parts that fit merged."""
    if not q.ids:
        return []
    plain = np.where(np.arange(len(w)) == 3, 0.0, w)
    ids = np.array(q.ids)
    scores = q.x @ plain
    first = int(np.lexsort((ids, -scores))[0])
    tops, per_part = [], []
    for (part_ids, x), fit_of in zip(q.parts, q.part_fits, strict=True):
        if part_ids:
            top = part_ids[int(np.lexsort((np.array(part_ids), -(x @ plain)))[0])]
            tops.append(top)
            if split.fits(*fit_of[top]):
                per_part.append([(top, 0.0)])
    ceiling = np.nextafter(scores[first], -np.inf)
    for top in set(tops) & set(q.ids):
        k = q.ids.index(top)
        scores[k] = scores[k] + w[3] if k == first else min(scores[k] + w[3], ceiling)
    whole = [(int(ids[k]), float(scores[k])) for k in np.lexsort((ids, -scores))[:10]]
    return [i for i, _ in split.merge(whole, per_part, 10)]


def measured(queries: Sequence[Query], w: Any) -> tuple[float, float, float]:
    """(R@5, R@1, R@5 of the queries with two or more relevant tools)."""
    found = [(q, scored_rank(q, w)) for q in queries]

    def recall(q: Query, ranked: list[int], k: int) -> float:
        return score_query(ranked, [[g] for g in q.relevant])[f"R@{k}"]

    multi = [recall(q, r, 5) for q, r in found if q.n_gold >= 2]
    return (
        sum(recall(q, r, 5) for q, r in found) / len(found),
        sum(recall(q, r, 1) for q, r in found) / len(found),
        sum(multi) / len(multi) if multi else float("nan"),
    )


def with_vectors(rankings: Path, vectors: Path, small: Path) -> tuple[Any, Any]:
    """The rankings and small-catalog cases with each catalog's tool vectors, each tool's
    name vector and each query's vector (for ``signals``)."""
    from tests.search.test_fusion import CATALOGS

    from toolcat.search.embeddings import MINILM, embedder
    from toolcat.search.split import split_request
    from toolcat.text.tokenize import split_words
    from tune_feedback import Space
    from tune_feedback import load as load_vectors
    from tune_fusion import Catalog

    model = embedder(MINILM)
    data, spaces = load_vectors(rankings, vectors)
    for space in spaces.values():
        space.names = model.encode([" ".join(split_words(k)) for k in space.catalog.keys])
        space.density = density(space.matrix)
    raw = load(small)["own"]
    for name, entry in json.loads(small.read_text())["own"].items():
        catalog = Catalog(entry["docs"])
        tools = dict(CATALOGS[name])
        words = [" ".join(split_words(k)) for k in catalog.keys]
        space = Space(
            catalog,
            model.encode([f"{w}: {tools[k]}" for w, k in zip(words, catalog.keys, strict=True)]),
        )
        space.names = model.encode(words)
        space.density = density(space.matrix)
        for row, q in zip(raw[name], entry["queries"], strict=True):
            texts = [q["text"], *split_request(q["text"])]
            for part, vector in zip([row, *row["parts"]], model.encode(texts), strict=True):
                part.update(space=space, catalog=catalog, vector=vector)
    return data, raw


def fit_and_held_out(
    data: dict[str, dict[str, list[Row]]], seed: int
) -> tuple[dict[tuple[str, str], list[Query]], dict[tuple[str, str], list[Row]]]:
    """Each (setting, source)'s fitting half, prepared, and its held-out half of rows."""
    train: dict[tuple[str, str], list[Query]] = {}
    test: dict[tuple[str, str], list[Row]] = {}
    for setting, sources in data.items():
        for name, rows in sources.items():
            first, second = halves(rows, seed, name)
            train[setting, name] = [prepare(q) for q in first]
            test[setting, name] = second
    return train, test


def report_signals(args: argparse.Namespace) -> None:
    data, small = with_vectors(Path(args.rankings), Path(args.vectors), Path(args.small))
    small_queries = [prepare(q) for rows in small.values() for q in rows]
    train, held_out = fit_and_held_out(data, args.seed)
    test = {key: [prepare(q) for q in rows] for key, rows in held_out.items()}
    names = sorted({name for _, name in train})
    base = list(range(len(FEATURES)))
    extra = {s: len(FEATURES) + i for i, s in enumerate(SIGNALS)}
    variants = [("three terms refitted", base)]
    variants += [(f"+ {s}", [*base, c]) for s, c in extra.items()]
    variants += [("+ every signal", [*base, *extra.values()])]
    groups = [(1.0, train[k]) for k in train] + [(args.small_weight, small_queries)]
    for label, columns in variants:
        w = fit_columns(groups, args.l2, columns)
        missed = sum(not q.gold[q.ids.index(scored_rank(q, w)[0])] for q in small_queries)
        print(f"\n{label}: {np.round(w[columns], 3).tolist()}, small-catalog cases missed {missed}")
        for setting in data:
            cells = [measured(test[setting, n], w) for n in names]
            for k, what in enumerate(("R@5", "R@1", "multi R@5")):
                row = [c[k] for c in cells]
                valid = [v for v in row if v == v]
                print(
                    f"{setting:<6} {what:<9} {sum(valid) / len(valid):6.3f} "
                    + " ".join(f"{n[:10]}={v:.3f}" for n, v in zip(names, row, strict=True)),
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rankings", help="A file from gather_rankings.py.")
    parser.add_argument("--small", required=True, help="From gather_rankings.py --small.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--l2", type=float, default=0.001)
    parser.add_argument("--small-weight", type=float, default=3.0)
    parser.add_argument("--no-loso", action="store_true", help="Skip leave-one-source-out.")
    parser.add_argument("--vectors", help="Measure SIGNALS instead (gather_rankings --vectors).")
    args = parser.parse_args()
    if args.vectors:
        report_signals(args)
        return
    data = load(Path(args.rankings))
    small = load(Path(args.small))["own"]
    small_queries = [prepare(q) for rows in small.values() for q in rows]
    train, test = fit_and_held_out(data, args.seed)
    names = sorted({name for _, name in train})

    def fit_on(keys: Sequence[tuple[str, str]]) -> HybridParams:
        groups = [(1.0, train[k]) for k in keys] + [(args.small_weight, small_queries)]
        return fit(groups, args.l2)

    params = fit_on(list(train))
    fitted = {name: getattr(params, name) for name in FEATURES[1:]}
    print(f"fitted: {fitted}  (shipped: {dict((n, getattr(HYBRID_PARAMS, n)) for n in fitted)})")
    print(
        f"small-catalog cases missed: before {small_misses(BASE, small) or 'none'}, "
        f"after {small_misses(params, small) or 'none'}"
    )
    before = {k: r5(new_rule(BASE), rows) for k, rows in test.items()}
    after = {k: r5(new_rule(params), rows) for k, rows in test.items()}
    for setting in data:
        print(f"\n{setting}, held-out half, R@5")
        print(f"{'':<10} {'mean':>6} " + " ".join(f"{n[:10]:>10}" for n in names))
        for label, cells in (("before", before), ("fitted", after)):
            row = [cells[setting, n] for n in names]
            print(f"{label:<10} {sum(row) / len(row):6.3f} " + " ".join(f"{c:10.3f}" for c in row))
    if args.no_loso:
        return
    print("\neach source left out of the fit: its held-out R@5, own / pooled, before -> after")
    wins = 0
    for name in names:
        left = fit_on([k for k in train if k[1] != name])
        cells = []
        for setting in data:
            cells.append((before[setting, name], r5(new_rule(left), test[setting, name])))
        gain = sum(a - b for b, a in cells) / len(cells)
        wins += gain > 0
        print(
            f"{name:<11} "
            + "  ".join(f"{b:.3f} -> {a:.3f}" for b, a in cells)
            + f"  mean {gain:+.4f}  ({', '.join(f'{getattr(left, n):.3f}' for n in FEATURES[1:])})",
            flush=True,
        )
    print(f"wins: {wins} of {len(names)}")


if __name__ == "__main__":
    main()
