"""Realistic vectors for 1M generated tools, made from real vectors (embedding 1M texts on
this CPU takes hours), for choosing and tuning an approximate nearest-neighbour index.

``scripts/bench_scale.py`` makes each generated tool from a real benchmark tool (its
name, description and parameters: the *base*) and one sentence and one parameter of a real
tool of another toolkit (the *context*: "... For Nager.Date: Get all available countries.").
This script encodes, with the shipped retriever (``Embedder.encode``, the reindex path):

- every real tool's own text (``embedding_text``, ~8,300 texts: the base vectors);
- every real tool's context text, the sentence and parameter a generated tool borrows
  from it ("For <its toolkit>: <its first sentence>. Parameters: <its first scalar one>");
- a seeded sample of ``--sample`` generated tools, their real text encoded (the check): half
  drawn from the whole catalog, half its first tools (whole toolkits, so siblings);
- ``--queries`` real benchmark queries, seeded (``Embedder.encode_queries``, the search path).

Then it fits ``v = normalise(a * base + b * context + noise)`` by least squares on half the
sample, the noise Gaussian with the residual's per-dimension spread, and writes the vectors of
all ``--size`` generated tools (``bench_scale.generate``'s order and seed) made that way with
a seeded noise (numpy PCG64, seed ``bench_scale.SEED``). On the other half of the sample it
reports the cosine of each synthesised vector to the real one, and compares the neighbour
structure of the real and synthesised sample: each query's best cosine, the gap between its
1st and 10th neighbour, and each tool's nearest other tool.

    python scripts/research/ann_vectors.py OUT_DIR [--size 1000000] [--sample 3000]

OUT_DIR gets ``real.npz`` (the encoded texts) and ``vectors-<size>.npy`` (float32) with
``queries.npy``; an existing ``real.npz`` is reused.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_scale  # noqa: E402
from toolcat import Tool  # noqa: E402
from toolcat.search.embeddings import RETRIEVER, embedder, embedding_text  # noqa: E402


def context_text(kit: dict[str, Any], tool: dict[str, Any]) -> str:
    """What a generated tool borrows from a real tool of its context toolkit."""
    text = f"For {kit['name']}: {bench_scale._phrase(tool)}."
    extra = bench_scale._context_param(tool, {})
    if extra is not None:
        key, schema = extra
        words = " ".join(w for w in re.split(r"[_\W]+", key) if w)
        text += f" Parameters: {words} {schema.get('description', '')}".rstrip()
    return text


def encode_real(out: Path, sample_size: int, query_count: int, size: int) -> dict[str, Any]:
    kits = bench_scale.real_toolkits()
    model = embedder(RETRIEVER)
    flat = [(k, t) for k, kit in enumerate(kits) for t in range(len(kit["tools"]))]
    start = time.perf_counter()
    base = model.encode([embedding_text(Tool.model_validate(kits[k]["tools"][t])) for k, t in flat])
    print(f"base: {len(flat)} tools, {time.perf_counter() - start:.0f} s", flush=True)
    start = time.perf_counter()
    context = model.encode([context_text(kits[k], kits[k]["tools"][t]) for k, t in flat])
    print(f"context: {time.perf_counter() - start:.0f} s", flush=True)
    rng = random.Random(bench_scale.SEED)
    # half spread over the catalog, half its first tools (whole toolkits: siblings' neighbours)
    wanted = set(rng.sample(range(size), sample_size // 2)) | set(range(sample_size // 2))
    origins: list[tuple[int, int, int, int]] = []
    texts: dict[int, str] = {}
    made = 0
    for manifest in bench_scale.generate(size, origins=origins):
        for tool in manifest["tools"]:
            if made in wanted:
                texts[made] = embedding_text(Tool.model_validate(tool))
            made += 1
    positions = sorted(texts)
    start = time.perf_counter()
    sample = model.encode([texts[i] for i in positions])
    print(f"sample: {len(positions)} generated tools, {time.perf_counter() - start:.0f} s")
    qs = bench_scale.queries(random.Random(bench_scale.SEED + 1), query_count)
    queries = np.stack(model.encode_queries(qs))
    np.savez(
        out / "real.npz",
        flat=np.array(flat, dtype=np.int32),
        base=base,
        context=context,
        origins=np.array(origins, dtype=np.int32),
        sample_positions=np.array(positions, dtype=np.int64),
        sample=sample,
        queries=queries,
    )
    (out / "queries.json").write_text(json.dumps(qs))
    return dict(np.load(out / "real.npz"))


def normalise(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def neighbour_figures(tools: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    scores = queries @ tools.T
    top = -np.sort(-scores, axis=1)[:, :10]
    own = tools @ tools.T
    np.fill_diagonal(own, -2)
    return {
        "query_best_cosine_median": round(float(np.median(top[:, 0])), 4),
        "query_gap_1_to_10_median": round(float(np.median(top[:, 0] - top[:, 9])), 4),
        "tool_nearest_other_median": round(float(np.median(own.max(axis=1))), 4),
        "tool_nearest_other_p10": round(float(np.percentile(own.max(axis=1), 10)), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=1000)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if (args.out / "real.npz").exists():
        real = dict(np.load(args.out / "real.npz"))
    else:
        real = encode_real(args.out, args.sample, args.queries, args.size)
    row = {(int(k), int(t)): i for i, (k, t) in enumerate(real["flat"].tolist())}
    origins = real["origins"][: args.size]
    base_rows = np.array([row[(k, t)] for k, t, _, _ in origins.tolist()], dtype=np.int64)
    context_rows = np.array([row[(k, t)] for _, _, k, t in origins.tolist()], dtype=np.int64)
    positions = real["sample_positions"]
    positions = positions[positions < args.size]
    sample = real["sample"][: len(positions)]
    fit, check = np.arange(len(positions)) % 2 == 0, np.arange(len(positions)) % 2 == 1
    a_b, *_ = np.linalg.lstsq(
        np.stack(
            [real["base"][base_rows[positions]], real["context"][context_rows[positions]]], axis=2
        )[fit].reshape(-1, 2),
        sample[fit].reshape(-1),
        rcond=None,
    )
    a, b = (float(x) for x in a_b)
    residual = sample[fit] - (
        a * real["base"][base_rows[positions[fit]]]
        + b * real["context"][context_rows[positions[fit]]]
    )
    sigma = float(residual.std())
    print(f"fit: a {a:.4f}, b {b:.4f}, noise sigma {sigma:.5f} per dimension")
    noise = np.random.Generator(np.random.PCG64(bench_scale.SEED))
    vectors = np.empty((len(origins), real["base"].shape[1]), dtype=np.float32)
    chunk = 100_000
    for at in range(0, len(origins), chunk):
        rows = slice(at, at + chunk)
        made = a * real["base"][base_rows[rows]] + b * real["context"][context_rows[rows]]
        made += noise.normal(0.0, sigma, made.shape).astype(np.float32)
        vectors[rows] = normalise(made)
    synthetic = vectors[positions[check]]
    cosines = (synthetic * sample[check]).sum(axis=1)
    base_only = (real["base"][base_rows[positions[check]]] * sample[check]).sum(axis=1)
    report = {
        "size": len(origins),
        "a": a,
        "b": b,
        "sigma": sigma,
        "cosine_synthetic_to_real": {
            "median": round(float(np.median(cosines)), 4),
            "p10": round(float(np.percentile(cosines, 10)), 4),
        },
        "cosine_base_alone_to_real": round(float(np.median(base_only)), 4),
        "real_sample": neighbour_figures(sample[check], real["queries"]),
        "synthetic_sample": neighbour_figures(synthetic, real["queries"]),
    }
    print(json.dumps(report, indent=1))
    np.save(args.out / f"vectors-{len(origins)}.npy", vectors)
    np.save(args.out / "queries.npy", real["queries"])
    (args.out / f"vectors-{len(origins)}.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
