"""The writing side of a registration alone: ``writer.register_stream`` over toolkits read
and made into rows beforehand (``bench_scale.py``'s seeded generator), into a fresh catalog,
once per page-cache size, alternated; the CPU time of the thread that writes.

    python scripts/bench_register_writer.py --size 200000 --cache-kib 2048 524288 --rounds 2
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=200_000, help="Tools registered.")
    parser.add_argument(
        "--cache-kib",
        type=int,
        nargs="+",
        default=[2048, 512 * 1024],
        help="writer.REGISTER_CACHE_KIB values to compare (2048: SQLite's default).",
    )
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import bench_scale
    from toolcat import Catalog
    from toolcat.errors import ManifestError
    from toolcat.registry.parallel import _load_here
    from toolcat.store import writer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        batches = bench_scale.write_batches(args.size, work / "manifests")
        paths = sorted(p for batch in batches for p in batch.iterdir())
        entries = [_load_here(path) for path in paths]
        assert not any(isinstance(e, ManifestError) for e in entries)
        gc.freeze()  # what was read stays out of the collections timed below
        for _ in range(args.rounds):
            for kib in args.cache_kib:
                db = work / f"catalog-{kib}.db"
                writer.REGISTER_CACHE_KIB = kib
                with Catalog(db, create=True) as catalog:
                    t0, c0 = time.perf_counter(), time.thread_time()
                    writer.register_stream(catalog._conn, iter(entries), replace=False)
                    cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
                for stale in work.glob(f"catalog-{kib}.db*"):
                    stale.unlink()
                figures = {"tools": args.size, "cache_kib": kib, "cpu_s": round(cpu, 1)}
                figures.update(wall_s=round(wall, 1), load=round(os.getloadavg()[0], 1))
                print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
