"""The plain baseline's rows (``toolcat eval --baseline``) for every source, own and pooled.

The same rows as ``evaluate(baseline=True)`` (``quality.evaluate.Baseline``: rank-bm25 +
base MiniLM by RRF k = 60, and base MiniLM alone, over name, description and parameter
names and descriptions) on the seeded sample ``toolcat eval --max-queries N --seed 0``
scores, in each source's own catalog and in the pooled one, without building toolcat's
catalogs: the base MiniLM runs through toolcat's ONNX export of it (checked against
sentence-transformers when it is exported) instead of sentence-transformers, so the
8,300 pooled tool texts take minutes on two cores, and its vectors are kept in ``--cache``.
``tune_guard.py --baseline OUT.json`` prints the margins over these rows.

    python scripts/research/plain_baseline.py OUT.json [BENCH] [--max-queries 1000]
        [--cache plain.npz]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from toolcat.quality.evaluate import Baseline, load_source, source_folders, split_queries  # noqa: E402
from toolcat.search.embeddings import MINILM, embedder  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent / "shared" / "bench"))
    parser.add_argument("--max-queries", type=int, default=1000)
    parser.add_argument("--cache", type=Path, help="an .npz of texts and their vectors")
    args = parser.parse_args()
    sources = [load_source(f) for f in source_folders(Path(args.bench))]
    known: dict[str, Any] = {}
    if args.cache is not None and args.cache.exists():
        kept = np.load(args.cache)
        known.update(zip(kept["texts"].tolist(), kept["vectors"], strict=True))
    model = embedder(MINILM)

    def encode(texts: Any) -> Any:
        missing = [t for t in texts if t not in known]
        if missing:
            known.update(zip(missing, model.encode(missing), strict=True))
        return np.stack([known[t] for t in texts])

    plain = Baseline(encode)
    out: dict[str, Any] = {"own": {}, "pooled": {}}
    for source in sources:
        sample = split_queries(
            source, learn_split=None, learn_fraction=None, max_queries=args.max_queries, seed=0
        ).score
        for setting, pooled, among in (("own", False, [source]), ("pooled", True, sources)):
            rows = plain.rows(source, sample, among, pooled)
            out[setting][source.name] = {
                r["mode"]: {k: r[k] for k in ("queries", "R@5", "nDCG@10")} for r in rows
            }
        print(source.name, json.dumps(out["own"][source.name]), flush=True)
        if args.cache is not None:
            np.savez(
                args.cache, texts=np.array(list(known)), vectors=np.stack(list(known.values()))
            )
    args.out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
