"""Fit the re-scoring terms of hybrid fusion on half of each source's queries; report the other
half, and each source left out of the fit.

``fusion.hybrid_fusion`` adds to each candidate's fused score ``cosine_weight · cosine +
cosine_cover_weight · cosine · coverage``, and ``fusion.lift_part_tops`` adds ``part_bonus`` to
each part's best tool (``HybridParams``). This script fits those three weights, with the first
three ``HybridParams`` (scripts/tune_fusion.py) held fixed, by a pairwise logistic (RankNet,
linear): for every query of the training half, every (gold, other) pair of its candidates (the
union of the BM25 and embedding top 50) should score gold higher. Each source counts alike in
each catalog (own and pooled), the small-catalog cases of tests/search/test_fusion.py count as
``--small-weight`` sources, and an L2 penalty keeps the weights near zero (the fusion before).
Part tops depend on the weights (a part is ranked by the same fusion), so the fit is redone
three times, each time with the tops of the last.

It reports held-out R@5 per source, own and pooled catalogs, through ``tune_fusion.new_rule``
(the engine's path: ``hybrid_fusion``, ``lift_part_tops``, ``split.merge``), before (the three
weights zero) and after, then the same with each source left out of the fit in turn (fitted on
the other six's training halves, scored on its held-out half).

    python scripts/tune_rerank.py RANKINGS.json --small SMALL.json [--seed 0] [--no-loso]

(RANKINGS.json and SMALL.json from scripts/gather_rankings.py, as for tune_fusion.py.)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tune_fusion import fused, halves, load, new_rule, r5, small_misses  # noqa: I001

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


def candidates(q: Row) -> tuple[list[int], Any]:
    _, found = fused(BASE, q, 1)
    ids = sorted(found)
    x = np.array(
        [[found[i].fused, found[i].semantic, found[i].semantic * found[i].cover, 0.0] for i in ids]
    ).reshape(len(ids), len(FEATURES))
    return ids, x


def prepare(q: Row) -> Query:
    ids, x = candidates(q)
    relevant = set(q["relevant"])
    gold = np.array([i in relevant for i in ids], dtype=bool)
    return Query(ids, x, gold, len(q["relevant"]), [candidates(p) for p in q["parts"]])


def set_part_tops(queries: Sequence[Query], w: Any) -> None:
    """Mark each query's candidates that are the best tool of one of its parts under ``w``."""
    for q in queries:
        tops = set()
        for ids, x in q.parts:
            if ids:
                scores = x @ w
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
            d = (gold[:, None, :] - other[None, :, :]).reshape(-1, len(FEATURES))
            diffs.append(d)
            weights.append(np.full(len(d), weight / len(queries) / len(d)))
    w = np.concatenate(weights)
    return np.concatenate(diffs), w / w.sum()


def logistic(d: Any, pw: Any, l2: float) -> Any:
    """Minimise sum(pw * log(1 + exp(-d @ v))) + l2 * |v - v0|^2 (Newton's method), v0 the
    fusion before at the scale the data likes best; returns v divided by its fused weight."""

    def loss(v: Any) -> float:
        return float((pw * np.logaddexp(0, -(d @ v))).sum())

    base = np.array([1.0, 0.0, 0.0, 0.0])
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rankings", help="A file from gather_rankings.py.")
    parser.add_argument("--small", required=True, help="From gather_rankings.py --small.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--l2", type=float, default=0.001)
    parser.add_argument("--small-weight", type=float, default=3.0)
    parser.add_argument("--no-loso", action="store_true", help="Skip leave-one-source-out.")
    args = parser.parse_args()
    data = load(Path(args.rankings))
    small = load(Path(args.small))["own"]
    small_queries = [prepare(q) for rows in small.values() for q in rows]
    train: dict[tuple[str, str], list[Query]] = {}
    test: dict[tuple[str, str], list[Row]] = {}
    for setting, sources in data.items():
        for name, rows in sources.items():
            first, second = halves(rows, args.seed, name)
            train[setting, name] = [prepare(q) for q in first]
            test[setting, name] = second
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
