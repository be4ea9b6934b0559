"""Leave-one-source-out scores of the trained retriever, from stored vectors (issue 22).

``scripts/train_retriever.py --loso`` trains one model per benchmark source with that source
left out, and writes that model's vectors of the source's tool texts and of the seeded query
sample ``toolcat eval --max-queries 1000 --seed 0`` scores (``loso-SOURCE.npz``: fp32 torch
and int8 ONNX), and the base model's (``base-SOURCE.npz``, plain texts too). This script scores
toolcat's own modes with those vectors through the ordinary ``evaluate`` path (the catalog,
reindex and search code, nothing re-implemented): the process's embedder answers from the
stored vectors instead of running a model. Beside them, on the same queries, the plain
baseline (``toolcat eval --baseline``: rank-bm25 + base MiniLM by RRF, and base MiniLM) and
today's default (hybrid with the base model).

    python scripts/loso_eval.py --data prepared.json.gz --vectors DIR [--json out.json]
        [--fusion FITTED.json] [--no-base] [--pooled]

``--pooled`` scores each left-out source S a second time, pooled: S's queries searched in one
catalog of every source's tools (``evaluate(pooled=True, score_only=[S])``, the ``toolcat eval
--pooled`` catalog). It needs each LOSO model's vectors of every other source's tools
(``alltools-S.npz``, ``train_retriever.py --loso --all-tools``, fp32), and takes the base
model's vectors of every tool from the union of the ``base-*.npz`` files. Mind what pooled
means here: the other six sources' tools are distractors the left-out model was trained on
(their tools and queries), so the trained rows are pooled among seen tools. Pooled among
unseen tools cannot be built from the dev sources under a LOSO model (each has seen all but
one); the base MiniLM rows are pooled among unseen tools by construction, and for the trained
model the held-out public sources of issue 22 (none of them trained on) pooled together are
that table (``toolcat eval --pooled --baseline`` on them).

The trained rows rank with the retriever's fusion constants (``fusion.MODEL_PARAMS``) and
the base rows with the base MiniLM's (``fusion.HYBRID_PARAMS``), as toolcat does. The
retriever's shipped constants were fitted on every source; ``--fusion`` (from
``scripts/research/tune_loso.py fit --json``) adds the honest rows: source S's hybrid with
the constants fitted on the other six (``held-out fit``), and with the base MiniLM's
(``MiniLM constants``, the retriever's before they were refitted).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import numpy as np  # noqa: E402

from toolcat.quality.evaluate import evaluate  # noqa: E402
from toolcat.search import embeddings, fusion  # noqa: E402
from toolcat.search.embeddings import MINILM, RETRIEVER  # noqa: E402
from train_retriever import BENCH, EVAL_QUERIES, loso_texts  # noqa: E402


class Stored(embeddings.Embedder):
    """An embedder that answers from stored vectors (keyed by text) instead of a model."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        super().__init__("stored")
        self.vectors = vectors

    def onnx_current(self) -> bool:
        return True

    def export_onnx(self) -> None:
        pass

    @property
    def dimension(self) -> int:
        return 384

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        return [self.vectors[t] for t in texts]


class Every(dict[str, Any]):
    """Stands in for the embedders of every model id (``embeddings._embedders``)."""

    def __init__(self, embedder: Stored) -> None:
        super().__init__()
        self.embedder = embedder

    def get(self, key: Any, default: Any = None) -> Any:
        return self.embedder


def lookup(texts: list[str], vectors: np.ndarray) -> dict[str, np.ndarray]:
    rows = vectors.astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return dict(zip(texts, rows, strict=True))


def score(
    bench: Path,
    source: str,
    vectors: dict[str, np.ndarray],
    modes: Sequence[str],
    params: fusion.HybridParams | None = None,
    pooled: bool = False,
    **options: Any,
) -> dict[str, dict[str, float]]:
    """``evaluate`` on one source with the embedder answering from ``vectors`` (and the
    retriever's fusion constants ``params`` when given); ``pooled``: its queries searched
    among every source's tools."""
    embeddings._embedders = Every(Stored(vectors))  # type: ignore[assignment]
    shipped = fusion.MODEL_PARAMS[RETRIEVER]
    fusion.MODEL_PARAMS[RETRIEVER] = params or shipped
    try:
        rows = evaluate(
            bench,
            sources=() if pooled else [source],
            score_only=[source],
            pooled=pooled,
            modes=modes,
            max_queries=EVAL_QUERIES,
            **options,
        )
    finally:
        fusion.MODEL_PARAMS[RETRIEVER] = shipped
    return {r["mode"]: {k: r[k] for k in ("queries", "R@1", "R@5", "nDCG@10")} for r in rows}


def every_base_vector(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, np.ndarray]:
    """The base model's vectors of every source's texts (tools, plain texts, eval queries):
    one model, so the union of the ``base-*.npz`` files."""
    found: dict[str, np.ndarray] = {}
    for other, source in data["sources"].items():
        texts = loso_texts(source) + list(source["plain"].values())
        found.update(lookup(texts, np.load(args.vectors / f"base-{other}.npz")["vectors"]))
    return found


def pooled_row(
    args: argparse.Namespace, data: dict[str, Any], name: str, fitted: dict[str, Any]
) -> dict[str, Any]:
    """Source ``name``'s queries among every source's tools: the base model's modes and the
    plain baseline, and (with ``alltools-NAME.npz``) the model that left ``name`` out."""
    base = every_base_vector(args, data)
    row: dict[str, Any] = {}
    today = score(
        args.bench,
        name,
        base,
        ("bm25", "embedding", "hybrid"),
        pooled=True,
        baseline=True,
        baseline_encoder=lambda texts: np.stack([base[t] for t in texts]),
        embedding_model=MINILM,
    )
    row["bm25"] = today["bm25"]
    row["base embedding"] = today["embedding"]
    row["base hybrid"] = today["hybrid"]
    row["minilm-baseline"] = today["minilm-baseline"]
    row["rrf-baseline"] = today["rrf-baseline"]
    every = args.vectors / f"alltools-{name}.npz"
    if not every.exists():
        return row
    others = np.load(every)
    for variant in args.variant or ("fp32", "int8"):
        trained = np.load(args.vectors / f"loso-{name}.npz")
        if variant not in trained:
            continue
        vectors = lookup(loso_texts(data["sources"][name]), trained[variant])
        for other, source in data["sources"].items():
            if other != name:  # fp32 only: the other sources' tools under the same model
                vectors.update(lookup(list(source["tools"].values()), others[f"tools-{other}"]))
        found = score(args.bench, name, vectors, ("embedding", "hybrid"), pooled=True)
        row[f"trained embedding {variant}"] = found["embedding"]
        row[f"trained hybrid {variant}"] = found["hybrid"]
        if name in fitted:
            held_out = fusion.HybridParams(**fitted[name])
            found = score(args.bench, name, vectors, ("hybrid",), held_out, pooled=True)
            row[f"trained hybrid {variant}, held-out fit"] = found["hybrid"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="train_retriever --write-data")
    parser.add_argument("--vectors", type=Path, required=True, help="folder of the .npz files")
    parser.add_argument("--bench", type=Path, default=BENCH)
    parser.add_argument("--source", action="append", default=[], help="only this source")
    parser.add_argument("--json", type=Path, help="also write the table here")
    parser.add_argument("--fusion", type=Path, help="tune_loso.py's constants per held-out source")
    parser.add_argument("--no-base", action="store_true", help="skip the base model's modes")
    parser.add_argument("--variant", action="append", default=[], help="only these (fp32, int8)")
    parser.add_argument(
        "--pooled", action="store_true", help="also score each source among every source's tools"
    )
    args = parser.parse_args()
    with gzip.open(args.data, "rt", encoding="utf-8") as f:
        data = json.load(f)
    fitted = json.loads(args.fusion.read_text()) if args.fusion else {}
    table: dict[str, dict[str, Any]] = {}
    pooled: dict[str, dict[str, Any]] = {}
    for name in args.source or sorted(data["sources"]):
        if args.pooled:
            pooled[name] = pooled_row(args, data, name, fitted)
            print(
                name,
                "pooled",
                json.dumps({k: (v["R@5"], v["nDCG@10"]) for k, v in pooled[name].items()}),
                flush=True,
            )
        source = data["sources"][name]
        texts = loso_texts(source)
        plain = list(source["plain"].values())
        base = lookup(texts + plain, np.load(args.vectors / f"base-{name}.npz")["vectors"])
        trained = np.load(args.vectors / f"loso-{name}.npz")
        row: dict[str, Any] = {}
        today = score(
            args.bench,
            name,
            base,
            ("bm25",) if args.no_base else ("bm25", "embedding", "hybrid"),
            baseline=True,
            baseline_encoder=lambda texts, base=base: np.stack([base[t] for t in texts]),
            embedding_model=MINILM,  # the base model's vectors, ranked with its constants
        )
        row["bm25"] = today["bm25"]
        if not args.no_base:
            row["base embedding"] = today["embedding"]
            row["base hybrid (today's default)"] = today["hybrid"]
        row["minilm-baseline"] = today["minilm-baseline"]
        row["rrf-baseline"] = today["rrf-baseline"]
        for variant in args.variant or ("fp32", "int8"):
            if variant in trained:
                vectors = lookup(texts, trained[variant])
                found = score(args.bench, name, vectors, ("embedding", "hybrid"))
                row[f"trained embedding {variant}"] = found["embedding"]
                row[f"trained hybrid {variant}"] = found["hybrid"]
                if name in fitted:
                    held_out = fusion.HybridParams(**fitted[name])
                    for label, params in (
                        ("MiniLM constants", fusion.HYBRID_PARAMS),
                        ("held-out fit", held_out),
                    ):
                        if params != fusion.MODEL_PARAMS[RETRIEVER]:
                            found = score(args.bench, name, vectors, ("hybrid",), params)
                        else:  # the shipped constants, scored above
                            found = {"hybrid": row[f"trained hybrid {variant}"]}
                        row[f"trained hybrid {variant}, {label}"] = found["hybrid"]
        table[name] = row
        print(name, json.dumps({k: (v["R@5"], v["nDCG@10"]) for k, v in row.items()}), flush=True)
    out = {"per_source": table, "mean": printed("own catalogs", table)}
    if pooled:
        out["pooled"] = pooled
        out["pooled_mean"] = printed("pooled (every source's tools)", pooled)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))


def printed(title: str, table: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Print one table (R@5 and nDCG@10 per source and mode, "-" where a mode was not scored)
    and return its mean row (each mode over the sources that have it)."""
    modes = list(dict.fromkeys(m for row in table.values() for m in row))
    print(f"\n{title}\n{'source':<12}" + "".join(f"{m[:26]:>28}" for m in modes))
    for name, row in table.items():
        cells = "".join(
            f"{row[m]['R@5']:>16.3f} {row[m]['nDCG@10']:.3f}    " if m in row else f"{'-':>28}"
            for m in modes
        )
        print(f"{name:<12}{cells}")
    mean = {
        m: {k: round(sum(r[m][k] for r in have) / len(have), 4) for k in ("R@5", "nDCG@10")}
        for m in modes
        if (have := [r for r in table.values() if m in r])
    }
    print(
        f"{'mean':<12}"
        + "".join(f"{mean[m]['R@5']:>16.3f} {mean[m]['nDCG@10']:.3f}    " for m in modes)
    )
    return mean


if __name__ == "__main__":
    main()
