"""Fit hybrid fusion's disagreement guard leaving each source out, own and pooled catalogs.

Reads the rankings ``gather_rankings.py`` saved for one model (BM25 and vector-index top 50
of the seeded sample ``toolcat eval --max-queries 1000 --seed 0`` scores, in each source's
own catalog and in the pooled one) and fits ``fusion.guarded_trust``'s three constants
(``guard_bias``, ``guard_lexical``, ``guard_semantic``) on top of the model's other fusion
constants (``fusion.params_for``). For speed, each query's R@5 is first computed at every
BM25 weight of a fine grid (the whole request fused at that weight, its parts as search
fuses them), so a guard setting is scored by looking its weights up. For each source S, the
setting with the best mean R@5 over the other six sources' own and pooled catalogs (each of
the twelve weighs the same; with ``--small``, among the settings that miss no more
small-catalog cases of tests/search/test_fusion.py than the unguarded fusion) is then scored
on S through the search engine's own fusion rule (``tune_fusion.new_rule``), own and pooled.

    python scripts/research/tune_guard.py RANKINGS.json [--small SMALL.json] [--model ID]
        [--json OUT.json] [--jobs 2] [--baseline PLAIN.json]

``--json`` writes the fitted constants per held-out source (``loso_eval.py --fusion``).

Labels are used to fit and to score; the guard itself reads only the two rankings.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts" / "research"))

from toolcat.quality.evaluate import score_query  # noqa: E402
from toolcat.search import split  # noqa: E402
from toolcat.search.embeddings import RETRIEVER  # noqa: E402
from toolcat.search.fusion import (  # noqa: E402
    HybridParams,
    agreement,
    lift_part_tops,
    params_for,
)
from tune_fusion import fused, load, new_rule, recall5, small_misses  # noqa: E402

STEPS = 20  # BM25 weights looked up: 0, 1/STEPS, ..., 1
BIASES = tuple(round(-0.6 + 0.1 * i, 2) for i in range(11))  # -0.6 .. 0.4
LEXICAL = (0.0, 0.2, 0.4, 0.8)
SEMANTIC = (0.0, 2.0, 4.0, 8.0)
Row = dict[str, Any]


def unguarded(params: HybridParams) -> HybridParams:
    return dataclasses.replace(params, guard_bias=0.0, guard_lexical=0.0, guard_semantic=0.0)


def prepare_row(params: HybridParams, q: Row) -> dict[str, Any]:
    """What a guard setting needs of one query: its unguarded BM25 weight, how far the
    rankings agree, both leads, and R@5 at every weight of the grid."""
    plain = unguarded(params)
    _, signals = fused(plain, q, 10)
    base = next(iter(signals.values())).trust if signals else 0.0
    lexical, semantic = q["lexical"], q["semantic"]
    lexical_lead = (
        1.0 - lexical[1][1] / lexical[0][1] if len(lexical) > 1 and lexical[0][1] > 0 else 1.0
    )
    semantic_lead = semantic[0][1] - semantic[1][1] if len(semantic) > 1 else 0.0
    per_part, tops = [], []
    for part in q["parts"]:  # the parts as search fuses them (the guard's own weight)
        found, part_signals = fused(params, part, 1)
        if not found:
            continue
        tops.append(found[0][0])
        best = part_signals[found[0][0]]
        if split.fits(best.semantic, best.cover):
            per_part.append(found)
    recalls = []
    for step in range(STEPS + 1):
        from toolcat.search.fusion import hybrid_fusion

        whole, candidates = hybrid_fusion(
            q["terms"],
            q["doc_freq"],
            q["n"],
            lexical,
            semantic,
            q["documents"],
            50,
            10,
            plain,
            trust=step / STEPS,
        )
        if tops:
            whole = lift_part_tops(candidates, tops, 10, plain)
        ranking = [i for i, _ in split.merge(whole, per_part, 10)]
        recalls.append(recall5(ranking, q))
    return {
        "base": base,
        "apart": 1.0 - agreement(lexical, semantic),
        "lexical_lead": lexical_lead,
        "semantic_lead": semantic_lead,
        "recalls": recalls,
    }


def looked_up(setting: tuple[float, float, float], rows: list[dict[str, Any]]) -> float:
    bias, lexical, semantic = setting
    total = 0.0
    for r in rows:
        shift = bias + lexical * r["lexical_lead"] - semantic * r["semantic_lead"]
        trust = min(1.0, max(0.0, r["base"] + r["apart"] * shift))
        total += r["recalls"][round(trust * STEPS)]
    return total / len(rows) if rows else 0.0


_data: dict[str, dict[str, list[Row]]] = {}
_params: list[HybridParams] = []


_fit_queries: list[int] = []


def _prepare(key: tuple[str, str]) -> tuple[tuple[str, str], list[dict[str, Any]]]:
    """One catalog's queries looked up (a seeded sample of ``--fit-queries`` of them)."""
    setting, name = key
    rows = _data[setting][name]
    if _fit_queries and len(rows) > _fit_queries[0]:
        rows = random.Random(f"guard:{name}").sample(rows, _fit_queries[0])
    return key, [prepare_row(_params[0], q) for q in rows]


METRICS = ("R@5", "nDCG@10")


def scored(rule: Any, rows: list[Row]) -> dict[str, float]:
    """Mean R@5 and nDCG@10 of a rule's rankings (strict)."""
    found = [score_query(rule(q), [[g] for g in q["relevant"]]) for q in rows]
    return {k: sum(f[k] for f in found) / len(found) for k in METRICS}


def print_line(name: str, line: dict[str, Any], columns: tuple[str, ...]) -> None:
    cells = "".join(
        f"{line[c]['R@5']:.3f}/{line[c]['nDCG@10']:.3f}".rjust(13) if c in line else f"{'-':>13}"
        for c in columns
    )
    margins = "".join(
        f"{line[m]['R@5']:+.3f}/{line[m]['nDCG@10']:+.3f}".rjust(15) if m in line else f"{'-':>15}"
        for m in ("guarded-rrf", "guarded-best", "hybrid-best", "emb-minilm")
    )
    print(f"{name[:11]:<11}{cells}{margins}", flush=True)


def main() -> None:
    import multiprocessing

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rankings", type=Path)
    parser.add_argument("--model", default=RETRIEVER, help="whose fusion constants to start from")
    parser.add_argument("--small", type=Path, help="gather_rankings.py --small for the model")
    parser.add_argument("--json", type=Path, help="write the fitted settings and scores here")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--fit-queries", type=int, default=0, help="fit on a seeded sample of this many a catalog"
    )
    parser.add_argument("--baseline", type=Path, help="plain_baseline.py's rows, for margins")
    args = parser.parse_args()
    _data.update(load(args.rankings))
    base = unguarded(params_for(args.model))
    _params.append(base)
    if args.fit_queries > 0:
        _fit_queries.append(args.fit_queries)
    small = load(args.small)["own"] if args.small else {}
    names = sorted(_data["own"])
    keys = [(s, n) for s in ("own", "pooled") for n in names if n in _data.get(s, {})]
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        prepared = dict(pool.map(_prepare, keys))
    print("looked up every query's R@5 at every BM25 weight", flush=True)
    grid = list(itertools.product(BIASES, LEXICAL, SEMANTIC))
    cells = {
        setting: {key: looked_up(setting, rows) for key, rows in prepared.items()}
        for setting in grid
    }
    allowed = grid
    if small:

        def missed(setting: tuple[float, float, float]) -> int:
            params = dataclasses.replace(
                base, guard_bias=setting[0], guard_lexical=setting[1], guard_semantic=setting[2]
            )
            return len(small_misses(params, small))

        floor = missed((0.0, 0.0, 0.0))
        allowed = [s for s in grid if missed(s) <= floor]
        print(
            f"small-catalog cases: unguarded misses {floor}; "
            f"{len(allowed)} of {len(grid)} settings miss no more"
        )
    chosen: dict[str, tuple[float, float, float]] = {}
    for held in [*names, "all"]:
        train = [k for k in keys if k[1] != held]
        # The best mean; among equals the smallest move from the unguarded fusion.
        chosen[held] = max(
            allowed,
            key=lambda s: (
                round(sum(cells[s][k] for k in train) / len(train), 6),
                -(abs(s[0]) + s[1] + s[2] / 10),
            ),
        )
        print(
            f"fitted without {held}: bias {chosen[held][0]}, lexical {chosen[held][1]}, "
            f"semantic {chosen[held][2]}: looked-up mean over the rest "
            f"{sum(cells[chosen[held]][k] for k in train) / len(train):.4f} "
            f"(unguarded {sum(cells[(0.0, 0.0, 0.0)][k] for k in train) / len(train):.4f})",
            flush=True,
        )
    plain = json.loads(args.baseline.read_text()) if args.baseline else {}
    table: dict[str, dict[str, dict[str, Any]]] = {}
    columns = ("bm25", "embedding", "hybrid", "guarded", "rrf-baseline", "minilm-baseline")
    for setting in ("own", "pooled"):
        print(
            f"\n{setting}: R@5/nDCG@10, each source with the guard fitted without it, scored "
            "through the search engine's fusion rule"
        )
        print(
            f"{'source':<11}"
            + "".join(f"{c[:12]:>13}" for c in columns)
            + "".join(
                f"{c:>15}" for c in ("guarded-rrf", "guarded-best", "hybrid-best", "emb-minilm")
            )
        )
        for name in names:
            rows = _data[setting].get(name)
            if not rows:
                continue
            held = chosen[name]
            params = dataclasses.replace(
                base, guard_bias=held[0], guard_lexical=held[1], guard_semantic=held[2]
            )
            line: dict[str, Any] = {
                "bm25": scored(lambda q: [i for i, _ in q["lexical"][:10]], rows),
                "embedding": scored(lambda q: [i for i, _ in q["semantic"][:10]], rows),
                "hybrid": scored(new_rule(unguarded(base)), rows),
                "guarded": scored(new_rule(params), rows),
            }
            line.update(plain.get(setting, {}).get(name, {}))
            best = {k: max(line["bm25"][k], line["embedding"][k]) for k in METRICS}
            line["guarded-best"] = {k: line["guarded"][k] - best[k] for k in METRICS}
            line["hybrid-best"] = {k: line["hybrid"][k] - best[k] for k in METRICS}
            if "rrf-baseline" in line:
                line["guarded-rrf"] = {
                    k: line["guarded"][k] - line["rrf-baseline"][k] for k in METRICS
                }
                line["emb-minilm"] = {
                    k: line["embedding"][k] - line["minilm-baseline"][k] for k in METRICS
                }
            table.setdefault(setting, {})[name] = line
            print_line(name, line, columns)
        got = table.get(setting, {})
        if got:
            keys = {k for line in got.values() for k in line}
            mean = {
                key: {k: sum(v[key][k] for v in got.values()) / len(got) for k in METRICS}
                for key in keys
                if all(key in v for v in got.values())
            }
            table[setting]["mean"] = mean
            print_line("mean", mean, columns)
    if args.json is not None:
        # tune_loso.py's shape ({held-out source or "all": HybridParams}), which
        # scripts/loso_eval.py --fusion reads; the R@5 table beside it.
        fitted = {
            held: dataclasses.asdict(
                dataclasses.replace(base, guard_bias=g[0], guard_lexical=g[1], guard_semantic=g[2])
            )
            for held, g in chosen.items()
        }
        args.json.write_text(json.dumps(fitted, indent=2))
        args.json.with_suffix(".r5.json").write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
