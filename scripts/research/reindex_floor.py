"""What a reindex costs around its encoder: ``Catalog.reindex()`` of a copy of a catalog
with the encoder replaced by an instant one (seeded random unit vectors), so the figure
is the floor no device can take a reindex under (decoding definitions, building texts,
ordering them, storing vectors, pruning, saving what the new revision needs). The
catalog's saved BM25 index is copied beside the copy, as a registered catalog has one.
``--gpu-shaped``: the document encoder reports a GPU device, as the torch encoder on CUDA
does (what ``by_tokens`` looks at).

    python scripts/research/reindex_floor.py CATALOG.db --gpu-shaped [--src OLD/src]

Prints one JSON object: wall and CPU seconds of the call, the report's tools/s, and the
top of its profile (cumulative seconds).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("catalog", type=Path, help="a registered catalog (copied, not changed)")
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    parser.add_argument("--gpu-shaped", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    import numpy as np

    from toolcat import Catalog
    from toolcat.search import batch_encoding, embeddings
    from toolcat.search import reindex as reindexing
    from toolcat.search.encoders import device

    rng = np.random.default_rng(0)

    class Instant:
        def encode_batches(self, batches: Any) -> Any:
            for keys, texts in batches:
                vectors = rng.standard_normal((len(texts), 384)).astype(np.float32)
                yield list(keys), vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

        def close(self) -> None:
            pass

    batch_encoding.encoder_for = lambda *_, **__: Instant()  # type: ignore[assignment]
    if args.gpu_shaped:
        embeddings.Embedder.texts_per_call = (  # type: ignore[method-assign]
            lambda self, batch_size: max(batch_size, device.GPU_TEXTS_PER_CALL)
        )
        real = reindexing.by_tokens

        class OnGpu:
            def __init__(self, encoder: Any) -> None:
                self.encoder = encoder

            def document_encoder(self) -> Any:
                found = self.encoder.document_encoder()
                return types.SimpleNamespace(device="cuda", tokenizer=found.tokenizer)

        reindexing.by_tokens = lambda encoder, texts, order, **kw: real(  # type: ignore[assignment]
            OnGpu(encoder), texts, order, **kw
        )
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "floor.db"
        shutil.copy(args.catalog, copy)
        saved = args.catalog.with_name(args.catalog.name + ".bm25")  # its saved BM25 index
        if saved.is_dir():
            shutil.copytree(saved, copy.with_name(copy.name + ".bm25"))
        catalog = Catalog(copy)
        profile = cProfile.Profile()
        wall, cpu = time.perf_counter(), time.process_time()
        profile.enable()
        report = catalog.reindex()
        profile.disable()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        catalog.close()
    rows: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    top = sorted(
        ((f"{Path(f).name}:{line}({name})", row[3]) for (f, line, name), row in rows.items()),
        key=lambda item: -item[1],
    )[:15]
    print(
        json.dumps(
            {
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "embedded": report.embedded,
                "tools_per_second": report.tools_per_second,
                "seconds": report.seconds,
                "shortlist_seconds": report.shortlist_seconds,
                "profile_cumulative_s": {name: round(s, 1) for name, s in top},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
