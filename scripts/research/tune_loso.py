"""Refit hybrid fusion's constants for the trained retriever, leaving each source out.

Reads the stored leave-one-source-out vectors of ``scripts/train_retriever.py --loso``
(``loso-SOURCE.npz``: the model that never saw SOURCE, its vectors of SOURCE's tool texts
and eval queries) and saves, for each source, the rankings hybrid search fuses: the engine's
own BM25 top 50 and vector-index top 50 for each query of the sample ``toolcat eval
--max-queries 1000 --seed 0`` scores and each part ``search/split.py`` cuts it into, in the
source's own catalog (``gather``: scripts/research/gather_rankings.py's format). Then
(``fit``) it scores a small grid of ``HybridParams`` on every source with the search
engine's fusion rule (scripts/research/tune_fusion.py's ``new_rule``: ``hybrid_fusion``,
``lift_part_tops``, ``split.merge``), and for each source picks the setting with the best
mean R@5 over the OTHER six, and over all seven for the shipped constants. The held-out
figures are then scored through ``evaluate`` by ``scripts/loso_eval.py --fusion OUT.json``.

    python scripts/research/tune_loso.py gather --data data.json.gz --vectors DIR RANKINGS.json
    python scripts/research/tune_loso.py fit RANKINGS.json [--small SMALL.json] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "scripts" / "research"))

import numpy as np  # noqa: E402

from gather_rankings import documents  # noqa: E402
from gather_rankings import gather as gather_source  # noqa: E402
from loso_eval import Every, Stored, lookup  # noqa: E402
from toolcat import Catalog  # noqa: E402
from toolcat.quality.evaluate import load_source, source_folders, split_queries  # noqa: E402
from toolcat.search import embeddings  # noqa: E402
from toolcat.search.embeddings import MINILM, RETRIEVER  # noqa: E402
from toolcat.search.fusion import HYBRID_PARAMS, MODEL_PARAMS, HybridParams  # noqa: E402
from train_retriever import BENCH, EVAL_QUERIES, loso_texts  # noqa: E402
from tune_fusion import load, new_rule, r5, recall5, small_misses  # noqa: E402

# The grid: BM25's weight, the name bonus, and one scale on both raw-cosine terms (their
# ratio kept): three constants, the ones a model's cosine scale moves.
LEXICAL_WEIGHTS = (0.5, 0.6, 0.7, 0.8)
NAME_BONUSES = (0.1, 0.2)
COSINE_SCALES = (0.0, 1.0, 3.0)


def grid(base: HybridParams) -> list[HybridParams]:
    return [
        dataclasses.replace(
            base,
            lexical_weight=weight,
            name_bonus=bonus,
            cosine_weight=round(base.cosine_weight * scale, 4),
            cosine_cover_weight=round(base.cosine_cover_weight * scale, 4),
        )
        for weight, bonus, scale in itertools.product(LEXICAL_WEIGHTS, NAME_BONUSES, COSINE_SCALES)
    ]


def gather(args: argparse.Namespace) -> None:
    with gzip.open(args.data, "rt", encoding="utf-8") as f:
        data = json.load(f)
    out: dict[str, Any] = {"own": {}}
    options = argparse.Namespace(depth=50)
    with tempfile.TemporaryDirectory() as tmp:
        for folder in source_folders(args.bench, args.source):
            source = load_source(folder)
            texts = loso_texts(data["sources"][source.name])
            if args.variant == "base":  # the base model's file: the plain texts after them
                texts += list(data["sources"][source.name]["plain"].values())
                rows = np.load(args.vectors / f"base-{source.name}.npz")["vectors"]
            else:
                rows = np.load(args.vectors / f"loso-{source.name}.npz")[args.variant]
            vectors = lookup(texts, rows)
            embeddings._embedders = Every(Stored(vectors))  # type: ignore[assignment]
            sample = split_queries(
                source, learn_split=None, learn_fraction=None, max_queries=EVAL_QUERIES, seed=0
            ).score
            # Stored vectors answer for any model id; the one recorded is what gather reads.
            with Catalog(Path(tmp) / f"{source.name}.db", embedding_model=MINILM) as catalog:
                catalog.register(source.toolkit)
                catalog.reindex()
                entry = gather_source(catalog, source, sample, vectors, False, options)
                entry["docs"] = documents(catalog, pooled=False)
            out["own"][source.name] = entry
            print(f"{source.name}: {len(sample)} queries", flush=True)
    args.out.write_text(json.dumps(out))


_own: dict[str, list[Any]] = {}
_small: dict[str, list[Any]] = {}


def _score(params: HybridParams) -> tuple[HybridParams, dict[str, float], int]:
    rule = new_rule(params)
    cells = {n: r5(rule, rows) for n, rows in sorted(_own.items())}
    return params, cells, len(small_misses(params, _small)) if _small else 0


def fit(args: argparse.Namespace) -> None:
    import multiprocessing

    _own.update(load(args.rankings)["own"])
    if args.small:
        _small.update(load(args.small)["own"])
    names = sorted(_own)
    table: list[tuple[HybridParams, dict[str, float], int]] = []
    # Forked workers share the loaded rankings.
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for params, cells, missed in pool.imap(_score, grid(HYBRID_PARAMS)):
            table.append((params, cells, missed))
            print(
                f"{params.lexical_weight} {params.name_bonus} {params.cosine_weight:.3f} "
                f"{params.cosine_cover_weight:.3f}: mean {sum(cells.values()) / len(cells):.4f} "
                + " ".join(f"{n[:8]} {cells[n]:.3f}" for n in names)
                + (f" small missed {missed}" if _small else ""),
                flush=True,
            )

    def best(over: list[str]) -> HybridParams:
        # Fewest small-catalog cases missed first (with --small), then mean R@5 over ``over``.
        return max(table, key=lambda row: (-row[2], sum(row[1][n] for n in over) / len(over)))[0]

    chosen = {held: best([n for n in names if n != held]) for held in names}
    chosen["all"] = best(names)
    for held, params in chosen.items():
        print(f"fitted without {held}: {dataclasses.asdict(params)}")
    if args.json is not None:
        args.json.write_text(
            json.dumps({k: dataclasses.asdict(v) for k, v in chosen.items()}, indent=2)
        )


def complement(args: argparse.Namespace) -> None:
    """How far each ranking finds what the other misses: per source, R@5 of BM25, of the
    embeddings, of hybrid (the shipped constants), and the share of queries whose gold tools
    (strict: every one) are all in one ranking's top 5 and not all in the other's."""
    for path in args.rankings:
        own = load(path)["own"]
        for name, rows in sorted(own.items()):
            params = MODEL_PARAMS.get(args.model, HYBRID_PARAMS)
            rules = {
                "bm25": lambda q: [i for i, _ in q["lexical"][:10]],
                "embedding": lambda q: [i for i, _ in q["semantic"][:10]],
                "hybrid": new_rule(params),
            }
            hits = {k: [recall5(rule(q), q) == 1.0 for q in rows] for k, rule in rules.items()}
            pairs = list(zip(hits["bm25"], hits["embedding"], strict=True))
            only_bm25 = sum(b and not e for b, e in pairs)
            only_emb = sum(e and not b for b, e in pairs)
            either = sum(b or e for b, e in pairs)
            lost = [
                sum(one and not h for one, h in zip(hits[k], hits["hybrid"], strict=True))
                for k in ("bm25", "embedding")
            ]
            cells = {k: r5(rule, rows) for k, rule in rules.items()}
            print(
                f"{path.name} {name}: "
                + " ".join(f"{k} {v:.3f}" for k, v in cells.items())
                + f" | all gold in top 5: BM25 only {only_bm25 / len(rows):.3f}, "
                f"embedding only {only_emb / len(rows):.3f}, either {either / len(rows):.3f}"
                f" | hybrid loses what BM25 had {lost[0] / len(rows):.3f}, what the embeddings"
                f" had {lost[1] / len(rows):.3f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    g = commands.add_parser("gather", help="Save each source's rankings under its LOSO model.")
    g.add_argument("out", type=Path)
    g.add_argument("--data", type=Path, required=True, help="train_retriever --write-data")
    g.add_argument("--vectors", type=Path, required=True, help="folder of loso-SOURCE.npz")
    g.add_argument("--variant", default="int8", help="int8 (shipped), fp32 or base")
    g.add_argument("--bench", type=Path, default=BENCH)
    g.add_argument("--source", action="append", default=[])
    f = commands.add_parser("fit", help="Fit the grid leaving each source out.")
    f.add_argument("rankings", type=Path)
    f.add_argument("--small", type=Path, help="gather_rankings.py --small, rules settings out")
    f.add_argument("--json", type=Path, help="write the fitted settings here")
    f.add_argument("--jobs", type=int, default=2, help="worker processes")
    c = commands.add_parser("complement", help="What each ranking finds that the other misses.")
    c.add_argument("rankings", type=Path, nargs="+")
    c.add_argument("--model", default=RETRIEVER, help="whose fusion constants hybrid uses")
    args = parser.parse_args()
    {"gather": gather, "fit": fit, "complement": complement}[args.command](args)


if __name__ == "__main__":
    main()
