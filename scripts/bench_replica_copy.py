"""Benchmark a replica's per-change work on follow mode's file: copy, check, swap-ready.

A copy of ``CATALOG`` stands in for Litestream's staging file (``FILE.follow``, with its
``-txid`` sidecar) in a folder this run makes inside ``--workdir`` (and removes); each
round runs ``Follower._copy_staged`` as a change does (the copy into ``FILE.incoming`` and
its check, then ``check_copy``'s schema, marker and journal mode), alternating two ways:

- ``overlapped`` (what a replica does on Linux): SQLite's ``quick_check`` of the staging file
  on a thread while it is copied, under a lock of the descriptor's own;
- ``serial`` (the way before, and the fallback without such locks): the copy, then
  ``quick_check`` of the copy.

Wall and CPU seconds per round and the median ratio. On ext4 the copy writes every byte; on
XFS (``mkfs.xfs -m reflink=1``, the default) or btrfs it is a reflink.

    python scripts/bench_replica_copy.py /path/to/1m.db --workdir /tmp/replica --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src")]

from toolcat.store import replica  # noqa: E402
from toolcat.store.replica import Follower  # noqa: E402


def classic_lock(fd: int) -> bool:
    """The lock before: the process's, which SQLite closing the file would drop."""
    import fcntl

    fcntl.lockf(fd, fcntl.LOCK_SH, replica.SQLITE_SHARED_SIZE, replica.SQLITE_SHARED_FIRST)
    return False


def one_round(follower: Follower, way: str) -> dict[str, Any]:
    own_lock = replica._read_lock
    if way == "serial":
        replica._read_lock = classic_lock
    try:
        steps: dict[str, float] = {}
        wall, cpu = time.perf_counter(), time.process_time()
        staged = follower._copy_staged(1, steps)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        replica._read_lock = own_lock
    assert staged is not None, "the staging file was not copied"
    follower._clear_incoming()
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)} | {
        name: round(seconds, 3) for name, seconds in steps.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("catalog", type=Path)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    own = Path(tempfile.mkdtemp(dir=args.workdir))  # only what this run made is removed
    served = own / "catalog.db"
    staging = Path(f"{served}{replica.STAGING_SUFFIX}")
    shutil.copyfile(args.catalog, staging)
    Path(f"{staging}-txid").write_text(f"{1:016x}\n")
    os.sync()
    follower = Follower(served, "file:///nowhere", follow=True)
    rounds: dict[str, list[dict[str, Any]]] = {"overlapped": [], "serial": []}
    try:
        one_round(follower, "overlapped")  # the page cache as a replica's: the file hot
        for _ in range(args.rounds):
            for way in ("serial", "overlapped"):
                os.sync()  # each round starts with nothing dirty to flush
                rounds[way].append(one_round(follower, way))
                print(json.dumps({way: rounds[way][-1]}), file=sys.stderr, flush=True)
    finally:
        follower.close()
        shutil.rmtree(own)
    median = {way: statistics.median(r["wall_s"] for r in got) for way, got in rounds.items()}
    print(
        json.dumps(
            {
                "catalog_mb": round(args.catalog.stat().st_size / 2**20, 1),
                "workdir": str(args.workdir),
                "rounds": rounds,
                "median_wall_s": median,
                "overlapped_over_serial": round(median["overlapped"] / median["serial"], 3),
                "load": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
