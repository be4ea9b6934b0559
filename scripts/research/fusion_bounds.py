"""How far per-query trust in hybrid fusion's two rankings could go at best: oracle bounds.

Reads the rankings scripts/research/gather_rankings.py saved, through
scripts/research/tune_fusion.py (its loading, seeded halves, shipped fusion and strict R@5), and
prints R@5 per source and their mean, in each source's own catalog, in the pooled one, and in
the pooled one with every other source's tools dropped from the rankings (what strict scoring
would give if those tools, many of which answer the request too, neither counted as misses nor
took places), on every query and on tune_fusion's held-out half:

- bm25 and embedding alone, the better of the two per source, the target (better + .03), the
  shipped fusion (``hybrid_fusion`` with the request's parts, as search runs it) and shipped
  minus the better single mode;
- selector oracle: per query the better of the BM25 and the embedding top 5 (knowing which
  ranking to trust, no mixing);
- weight oracles: per query the best BM25 weight w on a grid (0, .05, ..., 1) of
  ``w·minmax(BM25) + (1 − w)·minmax(cosine)`` over the two top-50 lists (``score_fusion``,
  request only), and of the shipped fusion with its per-query weight replaced by w (its
  visibility power set to 0, so its weight is w; parts and every other term as shipped);
- any of them: per query the best of the shipped fusion and those oracles; best w per source:
  the shipped fusion with the one w that suits the source best (an oracle per source, not per
  query); the share of queries whose R@5 w changes at all;
- candidate ceiling: R@5 if every gold tool among the request's two top-50 lists (and, "+
  parts", its parts' lists too) were ranked first;
- for each per-query oracle, the share of its gain over the shipped fusion a predictor of
  trust would have to capture to reach the target ((target − shipped) / (oracle − shipped);
  "met" when the shipped fusion already does, "out" when the oracle itself is short), per
  source and, in the mean column, for a mean of .60;
- among the queries where the two rankings' R@5 differ, how often the shipped fusion leans on
  the worse one (its top 5 shares more tools with that ranking's top 5), or on neither.

    python scripts/research/fusion_bounds.py RANKINGS.json [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tune_fusion import DEPTH, Row, halves, load, new_rule, recall5  # noqa: I001

from toolcat.search.fusion import HYBRID_PARAMS, score_fusion

GRID = [i / 20 for i in range(21)]
MEAN_TARGET = 0.60
WEIGHT_MATTERS = "share of queries w changes R@5"
TARGET = "target (best single + .03)"
GAP = "shipped − best single"
DECISIVE = "queries bm25 and embedding R@5 differ"
AGAINST = "... shipped leans on the worse one"
TIED = "... shipped leans on neither"
ORACLES = ("selector oracle", "weight oracle, min-max", "weight oracle, hybrid_fusion")
Scores = dict[str, list[float]]  # method -> R@5 of each query, in the source's row order
Cells = dict[str, dict[str, float]]  # figure -> source (and "mean") -> value


def top(ranking: Sequence[tuple[int, float]]) -> list[int]:
    return [i for i, _ in ranking]


def ceiling(q: Row, lists: Sequence[Sequence[tuple[int, float]]]) -> float:
    """R@5 if the gold tools among ``lists`` came first."""
    found = {i for ranking in lists for i, _ in ranking}
    return recall5([g for g in dict.fromkeys(q["relevant"]) if g in found], q)


def per_query(rows: Sequence[Row]) -> tuple[Scores, list[str]]:
    """Every method's R@5 per query, and which ranking the shipped fusion leans on."""
    shipped = new_rule(HYBRID_PARAMS)
    # visibility ** 0 == 1: the fusion's weight on BM25 is lexical_weight, whatever the query.
    fixed = [
        new_rule(dataclasses.replace(HYBRID_PARAMS, lexical_weight=w, visibility_power=0.0))
        for w in GRID
    ]
    scores: Scores = {}
    leans = []

    def add(name: str, value: float) -> None:
        scores.setdefault(name, []).append(value)

    for q in rows:
        lexical, semantic = q["lexical"][:DEPTH], q["semantic"][:DEPTH]
        bm25, embedding = recall5(top(lexical), q), recall5(top(semantic), q)
        fused = shipped(q)
        hybrid = recall5(fused, q)
        minmax = max(
            recall5(top(score_fusion([(w, lexical), (1 - w, semantic)], 5)), q) for w in GRID
        )
        by_weight = [recall5(rule(q), q) for rule in fixed]
        weighted = max(by_weight)
        add("bm25", bm25)
        add("embedding", embedding)
        add("shipped hybrid", hybrid)
        add(ORACLES[0], max(bm25, embedding))
        add(ORACLES[1], minmax)
        add(ORACLES[2], weighted)
        add("any of them", max(hybrid, bm25, embedding, minmax, weighted))
        add(WEIGHT_MATTERS, float(weighted > min(by_weight)))
        for w, value in zip(GRID, by_weight, strict=True):
            add(f"w={w:.2f}", value)
        add("candidate ceiling", ceiling(q, [lexical, semantic]))
        parts = [ranking for p in q["parts"] for ranking in (p["lexical"], p["semantic"])]
        add("candidate ceiling + parts", ceiling(q, [lexical, semantic, *parts]))
        shared = [len(set(fused[:5]) & set(top(r)[:5])) for r in (lexical, semantic)]
        leans.append(
            "bm25" if shared[0] > shared[1] else "embedding" if shared[1] > shared[0] else ""
        )
    return scores, leans


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def share(needed: float, headroom: float) -> str:
    """The share of ``headroom`` a predictor must capture to gain ``needed``."""
    if needed <= 0:
        return "met"
    if headroom < needed:
        return "out"
    return f"{needed / headroom:.2f}"


def report(title: str, names: list[str], cells: Cells, leans: Cells) -> None:
    """One table: a row per figure, a column per source after their mean."""
    print(f"\n{title}")
    print(f"{'':<34} {'mean':>10} " + " ".join(f"{n[:10]:>10}" for n in names))
    columns = ["mean", *names]

    def row(label: str, values: list[str]) -> None:
        print(f"{label:<34} " + " ".join(f"{v:>10}" for v in values))

    for label, values in cells.items():
        sign = "+" if label == GAP else ""
        row(label, [f"{values[c]:{sign}.3f}" for c in columns])
    shipped, target = cells["shipped hybrid"], cells[TARGET]
    for oracle in ORACLES:
        # The target is per source: the mean column says whether a mean of .60 is in reach.
        needed = {n: target[n] - shipped[n] for n in names} | {
            "mean": MEAN_TARGET - shipped["mean"]
        }
        row(
            f"share needed, {oracle.split(', ')[-1]}",
            [share(needed[c], cells[oracle][c] - shipped[c]) for c in columns],
        )
    row(DECISIVE, [f"{leans[DECISIVE][c]:.0f}" for c in columns])
    for label in (AGAINST, TIED):
        row(label, [f"{leans[label][c]:.3f}" for c in columns])


def table(
    sources: dict[str, list[Row]],
    scores: dict[str, tuple[Scores, list[str]]],
    keep: dict[str, set[int]] | None,
) -> tuple[list[str], Cells, Cells]:
    """Per-source means of each method over the rows ``keep`` holds (ids; None: every row),
    and, among the queries where the two rankings' R@5 differ, how often the shipped fusion
    leans on the one the selector oracle does not pick, or on neither."""
    names = sorted(sources)
    cells: Cells = {}
    leans: Cells = {DECISIVE: {}, AGAINST: {}, TIED: {}}
    for name in names:
        chosen = [i for i, q in enumerate(sources[name]) if keep is None or id(q) in keep[name]]
        method_scores, lean = scores[name]
        for method, values in method_scores.items():
            cells.setdefault(method, {})[name] = mean([values[i] for i in chosen])
        bm25, embedding = method_scores["bm25"], method_scores["embedding"]
        decisive = [i for i in chosen if bm25[i] != embedding[i]]
        loser = {i: "embedding" if bm25[i] > embedding[i] else "bm25" for i in decisive}
        leans[DECISIVE][name] = len(decisive)
        leans[AGAINST][name] = mean([float(lean[i] == loser[i]) for i in decisive])
        leans[TIED][name] = mean([float(lean[i] == "") for i in decisive])
    best = {n: max(cells["bm25"][n], cells["embedding"][n]) for n in names}
    ordered = {
        "bm25": cells["bm25"],
        "embedding": cells["embedding"],
        "best single": best,
        TARGET: {n: best[n] + 0.03 for n in names},
        "shipped hybrid": cells["shipped hybrid"],
        GAP: {n: cells["shipped hybrid"][n] - best[n] for n in names},
        **{o: cells[o] for o in ORACLES},
        "any of them": cells["any of them"],
        "best w per source (oracle)": {n: max(cells[f"w={w:.2f}"][n] for w in GRID) for n in names},
        "candidate ceiling": cells["candidate ceiling"],
        "candidate ceiling + parts": cells["candidate ceiling + parts"],
        WEIGHT_MATTERS: cells[WEIGHT_MATTERS],
    }
    for values in [*ordered.values(), *leans.values()]:
        values["mean"] = mean([values[n] for n in names])
    leans[DECISIVE]["mean"] = sum(leans[DECISIVE][n] for n in names)
    return names, ordered, leans


def own_tools_only(rows: Sequence[Row], own: set[int]) -> list[Row]:
    """Pooled rows with every other source's tool dropped from each ranking (request and
    parts); catalog statistics stay the pooled catalog's."""

    def cut(row: Row) -> Row:
        kept = {k: [(i, s) for i, s in row[k] if i in own] for k in ("lexical", "semantic")}
        return {**row, **kept}

    return [{**cut(q), "parts": [cut(p) for p in q["parts"]]} for q in rows]


def pooled_sources(path: Path) -> dict[str, set[int]]:
    """Each source's tools as pooled row ids (tune_fusion.Catalog numbers them in order)."""
    data = json.loads(path.read_text())
    keys = list(data.get("pooled_docs", {}))
    return {
        name: {i for i, key in enumerate(keys) if key.startswith(prefix)}
        for name, prefix in data.get("prefixes", {}).items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rankings", help="A file from gather_rankings.py.")
    parser.add_argument("--seed", type=int, default=0, help="tune_fusion.py's halves.")
    args = parser.parse_args()
    data = load(Path(args.rankings))
    if data.get("pooled"):
        own = pooled_sources(Path(args.rankings))
        data["pooled, other sources' tools dropped"] = {
            name: own_tools_only(rows, own[name]) for name, rows in data["pooled"].items()
        }
    for setting, sources in data.items():
        scores = {name: per_query(rows) for name, rows in sources.items()}
        held_out = {
            name: {id(q) for q in halves(rows, args.seed, name)[1]}
            for name, rows in sources.items()
        }
        for label, keep in (("every query", None), (f"held-out half (seed {args.seed})", held_out)):
            names, cells, leans = table(sources, scores, keep)
            report(f"{setting}, {label}, strict R@5", names, cells, leans)


if __name__ == "__main__":
    main()
