"""Fit the "nothing fits" calibration (search/calibration.py: WEIGHTS, INTERCEPT, THRESHOLD)
on half of each benchmark source's queries and report the other half.

Each source's queries are searched (hybrid, ``Catalog.search``) in five catalogs:

- answerable: its own catalog (``own``) and the catalog of every source (``pooled``);
- foreign: every *other* source's tools (``foreign``, the realistic case of a request nobody's
  tools answer, though a like tool elsewhere answers some), the next source's tools alone
  (``paired``, closer to a catalog of another domain), and as many tools drawn from the other
  sources as the source has (``matched``).

Catalog size moves every number a search can sum up (the best cosine of 8,000 tools is higher
than of 100, the spread of the top 50 lower), so answerable and foreign queries are each seen in
small and large catalogs; fitted on own against foreign alone, the combination learnt "large
catalog: nothing fits" and said it to 19% of answerable queries in the pooled catalog.

A logistic regression over ``QueryContext.features()`` (each source and each catalog weighing
alike) is fitted on one half; the threshold is the lowest that keeps "nothing fits" to at most
``--own-budget`` of the half's own-catalog queries (mean over sources). The other half is then
searched again with the fitted constants, and with the per-hit rule alone (no context: the
shipped behaviour before) for comparison.

    python scripts/research/tune_match.py [BENCH] [--max-queries 200] [--cache vectors.db]
    python scripts/research/tune_match.py [BENCH] --loso DATA VECTORS [--max-queries 200]

``--loso`` refits it for the packaged retriever, leaving each source out: source S's queries
(drawn from the sample ``toolcat eval --max-queries 1000`` scores) are searched in the five
catalogs embedded by the model that never saw S (``scripts/train_retriever.py --loso
--all-tools``: ``loso-S.npz`` holds its vectors of S's tools and eval queries,
``alltools-S.npz`` of every other source's tools); S is then judged by the constants fitted
on the other six sources' queries (against the base MiniLM's constants, which served the
retriever before), and the shipped constants are fitted on all seven.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from toolcat import Catalog  # noqa: E402
from toolcat.quality.evaluate import (  # noqa: E402
    Query,
    Source,
    load_source,
    reindex_with_vector_cache,
    source_folders,
)
from toolcat.search import calibration, fusion  # noqa: E402

ANSWERABLE = ("own", "pooled")
FOREIGN = ("foreign", "paired", "matched")
KINDS = ANSWERABLE + FOREIGN

seen: list[calibration.QueryContext | None] = []
_query_context = calibration.query_context


def _recording(
    signals: Mapping[int, fusion.Candidate],
    fitted: calibration.Calibration = calibration.MINILM_CALIBRATION,
) -> calibration.QueryContext | None:
    context = _query_context(signals, fitted)
    seen.append(context)
    return context


def features(catalog: Catalog, text: str) -> list[float] | None:
    """The features of the whole request's hybrid search (None: nothing to sum up)."""
    seen.clear()
    catalog.search(text, mode="hybrid", k=10)
    context = seen[0] if seen else None
    return list(context.features()) if context is not None else None


def fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-2) -> tuple[float, np.ndarray]:
    """Weighted L2-regularised logistic regression (Newton steps) on standardised features;
    returns (intercept, weights) on the raw features."""
    mean, scale = x.mean(0), x.std(0) + 1e-9
    z = np.c_[np.ones(len(x)), (x - mean) / scale]
    penalty = l2 * np.diag(np.r_[0.0, np.ones(z.shape[1] - 1)])
    b = np.zeros(z.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-z @ b))
        gradient = z.T @ (w * (p - y)) + penalty @ b
        hessian = (z * (w * p * (1 - p))[:, None]).T @ z + penalty
        b -= np.linalg.solve(hessian, gradient)
    weights = b[1:] / scale
    return float(b[0] - (weights * mean).sum()), weights


def held_out(catalog: Catalog, queries: list[Query]) -> float:
    said = sum(catalog.search(q.text, mode="hybrid", k=10).no_match for q in queries)
    return said / len(queries) if queries else 0.0


def fit_calibration(
    rows: Mapping[str, Mapping[str, list[list[float]]]],
    own_budget: float,
    keep: calibration.Calibration | None = None,
) -> calibration.Calibration:
    """The logistic over ``rows`` ({source: {kind: features}}; each source and each kind
    weighing alike), or ``keep``'s weights and intercept, and the lowest threshold that
    keeps "nothing fits" to at most ``own_budget`` of own-catalog queries (mean over
    sources)."""
    if keep is not None:
        return _threshold(rows, own_budget, keep.intercept, np.array(keep.weights))
    xs, ys, ws = [], [], []
    for per_kind in rows.values():
        for kind, x in per_kind.items():
            if not x:
                continue
            label = 0.0 if kind in ANSWERABLE else 1.0
            group = len(ANSWERABLE) if kind in ANSWERABLE else len(FOREIGN)
            xs.append(np.array(x))
            ys.append(np.full(len(x), label))
            ws.append(np.full(len(x), 1.0 / len(x) / group))
    weight = np.concatenate(ws)
    intercept, weights = fit(np.vstack(xs), np.concatenate(ys), weight / weight.mean())
    return _threshold(rows, own_budget, intercept, weights)


def _threshold(
    rows: Mapping[str, Mapping[str, list[list[float]]]],
    own_budget: float,
    intercept: float,
    weights: np.ndarray,
) -> calibration.Calibration:
    def rate(x: list[list[float]], threshold: float) -> float:
        return float(np.mean(intercept + np.array(x) @ weights > threshold)) if x else 0.0

    owns = [r["own"] for r in rows.values() if r["own"]]
    scores = np.concatenate([intercept + np.array(x) @ weights for x in owns])
    threshold = float(max(scores)) + 1e-6
    for t in sorted(scores, reverse=True):
        if np.mean([rate(x, t) for x in owns]) > own_budget:
            break
        threshold = float(t)
    return calibration.Calibration(
        tuple(round(float(w), 3) for w in weights), round(intercept, 3), round(threshold, 3)
    )


def loso(args: argparse.Namespace, sources: list[Source]) -> None:
    """The retriever's calibration, leaving each source out (``--loso``)."""
    import gzip
    import json

    sys.path.insert(0, str(ROOT / "scripts"))
    from loso_eval import Every, Stored, lookup
    from toolcat.quality.evaluate import split_queries
    from toolcat.search import embeddings
    from train_retriever import EVAL_QUERIES, loso_texts

    data_path, folder = Path(args.loso[0]), Path(args.loso[1])
    with gzip.open(data_path, "rt", encoding="utf-8") as f:
        data = json.load(f)["sources"]
    model = embeddings.RETRIEVER
    names = [s.name for s in sources]
    queries: dict[str, list[Query]] = {}
    rows: dict[str, dict[str, list[list[float]]]] = {}
    judged: dict[str, dict[str, tuple[float, float, float]]] = {}
    started = time.perf_counter()
    shipped = calibration.CALIBRATIONS[model]

    def model_of(i: int, source: Source) -> None:
        """The embedder answers with the vectors of the model that left ``source`` out."""
        vectors = lookup(
            loso_texts(data[source.name]), np.load(folder / f"loso-{source.name}.npz")["fp32"]
        )
        others = np.load(folder / f"alltools-{source.name}.npz")
        for other in names:
            if other != source.name:
                texts = list(data[other]["tools"].values())
                vectors.update(lookup(texts, others[f"tools-{other}"]))
        embeddings._embedders = Every(Stored(vectors))  # type: ignore[assignment]

    def judge(
        made: Mapping[str, Catalog], name: str, fitted: calibration.Calibration
    ) -> dict[str, float]:
        calibration.CALIBRATIONS[model] = fitted
        try:
            return {k: held_out(made[k], queries[name]) for k in KINDS}
        finally:
            calibration.CALIBRATIONS[model] = shipped

    with tempfile.TemporaryDirectory() as tmp:
        paths: dict[str, dict[str, Path]] = {}
        before: dict[str, dict[str, float]] = {}
        for i, source in enumerate(sources):
            name = source.name
            sample = split_queries(
                source, learn_split=None, learn_fraction=None, max_queries=EVAL_QUERIES, seed=0
            ).score
            rng = random.Random(f"{args.seed}:{name}")
            queries[name] = rng.sample(sample, min(args.max_queries, len(sample)))
            model_of(i, source)
            pool = [(o, t) for o in sources if o is not source for t in o.toolkit.tools]
            chosen = random.Random(f"matched:{name}").sample(
                pool, min(len(pool), len(source.toolkit.tools))
            )
            kits = [
                o.toolkit.model_copy(update={"tools": [t for p, t in chosen if p is o]})
                for o in sources
                if o is not source
            ]
            toolkits = {
                "own": [source.toolkit],
                "pooled": [s.toolkit for s in sources],
                "foreign": [s.toolkit for s in sources if s is not source],
                "paired": [sources[(i + 1) % len(sources)].toolkit],
                "matched": [k for k in kits if k.tools],
            }
            paths[name] = {k: Path(tmp) / f"{i}-{k}.db" for k in KINDS}
            made = {}
            for kind in KINDS:
                made[kind] = Catalog(paths[name][kind])
                made[kind].register(*toolkits[kind])
                made[kind].reindex()
            calibration.query_context = _recording
            try:
                rows[name] = {
                    kind: [
                        f for q in queries[name] if (f := features(made[kind], q.text)) is not None
                    ]
                    for kind in KINDS
                }
            finally:
                calibration.query_context = _query_context
            before[name] = judge(made, name, calibration.MINILM_CALIBRATION)
            for catalog in made.values():
                catalog.close()
            print(f"{name}: features in {time.perf_counter() - started:.0f}s", flush=True)
        # Two refits: the whole logistic, and the threshold alone over the base MiniLM's
        # weights (one constant).
        minilm = calibration.MINILM_CALIBRATION
        fitted: dict[str, dict[str, calibration.Calibration]] = {"refit": {}, "threshold": {}}
        for held in [*names, "all"]:
            others = {n: r for n, r in rows.items() if n != held}
            fitted["refit"][held] = fit_calibration(others, args.own_budget)
            fitted["threshold"][held] = fit_calibration(others, args.own_budget, minilm)
            for how in fitted:
                print(f"{how}, fitted without {held}: {fitted[how][held]}", flush=True)
        for i, source in enumerate(sources):
            name = source.name
            model_of(i, source)
            made = {k: Catalog(paths[name][k]) for k in KINDS}
            after = {how: judge(made, name, fitted[how][name]) for how in fitted}
            for catalog in made.values():
                catalog.close()
            judged[name] = {
                k: (before[name][k], after["threshold"][k], after["refit"][k]) for k in KINDS
            }
    print(
        "held-out source, the base MiniLM's constants -> its weights with the threshold "
        f"fitted without the source -> the whole logistic fitted without it: {', '.join(KINDS)}"
    )
    for name, by_kind in judged.items():
        cells = "  ".join("->".join(f"{v:.2f}" for v in values) for values in by_kind.values())
        print(f"  {name:<12} {len(queries[name]):>4}  {cells}")
    means = "  ".join(
        "->".join(f"{np.mean([r[k][j] for r in judged.values()]):.3f}" for j in range(3))
        for k in KINDS
    )
    print(f"  {'mean':<12} {'':>4}  {means}")
    if args.json is not None:
        out = {
            "fitted": {
                how: {k: dataclasses.asdict(v) for k, v in by.items()} for how, by in fitted.items()
            },
            "judged": judged,
            "features": rows,
        }
        Path(args.json).write_text(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent / "shared" / "bench"))
    parser.add_argument("--max-queries", type=int, default=200)
    parser.add_argument("--own-budget", type=float, default=0.10)
    parser.add_argument("--cache", default="vectors.db", help="Vector cache file.")
    parser.add_argument("--source", action="append", default=[])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loso", nargs=2, metavar=("DATA", "VECTORS"), help="the retriever's")
    parser.add_argument("--json", help="--loso: also write the fitted constants here")
    args = parser.parse_args()
    sources: list[Source] = [load_source(f) for f in source_folders(Path(args.bench), args.source)]
    if len(sources) < 2:
        raise SystemExit("needs two sources or more (foreign catalogs are the others' tools)")
    if args.loso:
        loso(args, sources)
        return
    fit_half: dict[str, list[Query]] = {}
    test_half: dict[str, list[Query]] = {}
    for source in sources:
        rng = random.Random(f"{args.seed}:{source.name}")
        sample = rng.sample(source.queries, min(args.max_queries, len(source.queries)))
        fit_half[source.name], test_half[source.name] = sample[::2], sample[1::2]
    started = time.perf_counter()
    calibration.query_context = _recording
    with tempfile.TemporaryDirectory() as tmp:

        def catalog(name: str, toolkits: list[Any]) -> Catalog:
            made = Catalog(Path(tmp) / f"{name}.db")
            made.register(*toolkits)
            reindex_with_vector_cache(made, Path(args.cache))
            return made

        everything = catalog("all", [s.toolkit for s in sources])
        owns = {s.name: catalog(f"own-{i}", [s.toolkit]) for i, s in enumerate(sources)}
        matched: dict[str, Catalog] = {}
        for i, source in enumerate(sources):
            pool = [(o, t) for o in sources if o is not source for t in o.toolkit.tools]
            chosen = random.Random(f"matched:{source.name}").sample(
                pool, min(len(pool), len(source.toolkit.tools))
            )
            kits = [
                o.toolkit.model_copy(update={"tools": [t for p, t in chosen if p is o]})
                for o in sources
                if o is not source
            ]
            matched[source.name] = catalog(f"matched-{i}", [k for k in kits if k.tools])

        def in_each(source: Source, i: int, measure: Callable[[Catalog], Any]) -> dict[str, Any]:
            out = {
                "own": measure(owns[source.name]),
                "pooled": measure(everything),
                "paired": measure(owns[sources[(i + 1) % len(sources)].name]),
                "matched": measure(matched[source.name]),
            }
            everything.remove(source.toolkit.name)  # every other source's tools
            try:
                out["foreign"] = measure(everything)
            finally:
                everything.register(source.toolkit)
            return out

        rows: dict[str, dict[str, list[list[float]]]] = {}
        for i, source in enumerate(sources):
            got = in_each(
                source,
                i,
                lambda c, s=source: [
                    f for q in fit_half[s.name] if (f := features(c, q.text)) is not None
                ],
            )
            rows[source.name] = {k: got[k] for k in KINDS}
            print(f"{source.name}: features in {time.perf_counter() - started:.0f}s", flush=True)
        calibration.query_context = _query_context

        xs, ys, ws = [], [], []
        for per_kind in rows.values():
            for kind, x in per_kind.items():
                if not x:
                    continue
                label = 0.0 if kind in ANSWERABLE else 1.0
                group = len(ANSWERABLE) if kind in ANSWERABLE else len(FOREIGN)
                xs.append(np.array(x))
                ys.append(np.full(len(x), label))
                ws.append(np.full(len(x), 1.0 / len(x) / group))
        weight = np.concatenate(ws)
        intercept, weights = fit(np.vstack(xs), np.concatenate(ys), weight / weight.mean())

        def rate(x: list[list[float]], threshold: float) -> float:
            if not x:
                return 0.0
            return float(np.mean(intercept + np.array(x) @ weights > threshold))

        own_scores = np.concatenate(
            [intercept + np.array(r["own"]) @ weights for r in rows.values() if r["own"]]
        )
        threshold = max(own_scores) + 1e-6
        for t in sorted(own_scores, reverse=True):
            if np.mean([rate(r["own"], t) for r in rows.values()]) > args.own_budget:
                break
            threshold = float(t)
        print("fit half, mean over sources: " + ", ".join(KINDS))
        print(
            "  "
            + " / ".join(
                f"{np.mean([rate(r[k], threshold) for r in rows.values()]):.3f}" for k in KINDS
            )
        )
        print(
            f"fitted: WEIGHTS = ({', '.join(f'{w:.3f}' for w in weights)}), "
            f"INTERCEPT = {intercept:.3f}, THRESHOLD = {threshold:.3f}"
        )
        calibration.WEIGHTS = tuple(float(w) for w in weights)
        calibration.INTERCEPT, calibration.THRESHOLD = intercept, threshold

        per_hit = calibration.match
        report: dict[str, dict[str, tuple[float, float]]] = {}
        for i, source in enumerate(sources):
            queries = test_half[source.name]
            new = in_each(source, i, lambda c, q=queries: held_out(c, q))
            calibration.match = lambda c, mode, context=None: per_hit(c, mode)  # the rule before
            try:
                old = in_each(source, i, lambda c, q=queries: held_out(c, q))
            finally:
                calibration.match = per_hit
            report[source.name] = {k: (float(old[k]), float(new[k])) for k in KINDS}
        print(f"held-out half, per-hit rule before -> calibrated: {', '.join(KINDS)}")
        for name, by_kind in report.items():
            cells = "  ".join(f"{o:.2f}->{n:.2f}" for o, n in by_kind.values())
            print(f"  {name:<12} {len(test_half[name]):>4}  {cells}")
        means = "  ".join(
            f"{np.mean([r[k][0] for r in report.values()]):.3f}->"
            f"{np.mean([r[k][1] for r in report.values()]):.3f}"
            for k in KINDS
        )
        print(f"  {'mean':<12} {'':>4}  {means}")
        for made in [everything, *owns.values(), *matched.values()]:
            made.close()


if __name__ == "__main__":
    main()
