"""Benchmark a replica's per-change work on follow mode's file: copy or patch, check, swap-ready.

A copy of ``CATALOG`` stands in for Litestream's staging file (``FILE.follow``, with its
``-txid`` sidecar) in a folder this run makes inside ``--workdir`` (and removes); each
round runs ``Follower._copy_staged`` as a change does (the copy into ``FILE.incoming`` and
its check, then ``check_copy``'s schema, marker and journal mode), alternating the ways
asked for (``--ways``):

- ``copy`` (a replica's first change, or one whose standby cannot be used): follow mode's
  file copied whole, SQLite's ``quick_check`` of it on a thread meanwhile, under a lock of
  the descriptor's own;
- ``patch`` (each later change): the copy served before (``FILE.standby``, here the
  catalog with ``--changed`` random 4 KiB blocks made different, as a change leaves it)
  patched to follow mode's bytes, the same check meanwhile;
- ``serial`` (the way before the overlapped check, and the fallback without such locks):
  the copy, then ``quick_check`` of the copy.

Wall and CPU seconds per round and the median ratios to ``copy``. On ext4 the copy writes
every byte; on XFS (``mkfs.xfs -m reflink=1``, the default) or btrfs it is a reflink.

    python scripts/bench_replica_copy.py /path/to/1m.db --workdir /tmp/replica --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
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


def make_standby(follower: Follower, before: Path) -> None:
    """The copy served before, as a change finds it: ``before``'s bytes at the standby name."""
    assert follower.standby is not None
    shutil.copyfile(before, follower.standby)
    os.chmod(follower.standby, 0o644)
    # Recorded as the replica records the file it sets aside: only that one is patched.
    follower.state["standby"] = replica._own_stamp(follower.standby)


def one_round(follower: Follower, way: str, before: Path) -> dict[str, Any]:
    own_lock = replica._read_lock
    if way == "serial":
        replica._read_lock = classic_lock
    if way == "patch":
        make_standby(follower, before)
        os.sync()  # each round starts with nothing dirty to flush
    elif follower.standby is not None:
        follower.standby.unlink(missing_ok=True)
    try:
        steps: dict[str, float] = {}
        wall, cpu = time.perf_counter(), time.process_time()
        staged = follower._copy_staged(1, steps)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        replica._read_lock = own_lock
    assert staged is not None, "the staging file was not copied"
    assert ("patch" in steps) == (way == "patch"), steps
    follower._clear_incoming()
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)} | {
        name: round(seconds, 3) for name, seconds in steps.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("catalog", type=Path)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ways", default="copy,patch", help="copy, patch, serial (commas).")
    parser.add_argument(
        "--changed", type=int, default=2000, help="4 KiB blocks the standby differs in."
    )
    args = parser.parse_args()
    ways = args.ways.split(",")
    args.workdir.mkdir(parents=True, exist_ok=True)
    own = Path(tempfile.mkdtemp(dir=args.workdir))  # only what this run made is removed
    served = own / "catalog.db"
    staging = Path(f"{served}{replica.STAGING_SUFFIX}")
    shutil.copyfile(args.catalog, staging)
    Path(f"{staging}-txid").write_text(f"{1:016x}\n")
    before = own / "before.db"  # the revision before: the catalog with blocks changed
    shutil.copyfile(args.catalog, before)
    blocks = staging.stat().st_size // 4096
    with open(before, "r+b") as f:
        for block in random.Random(20261130).sample(range(1, blocks), args.changed):
            f.seek(block * 4096 + 100)
            f.write(b"\xa5" * 16)
    os.sync()
    follower = Follower(served, "file:///nowhere", follow=True)
    rounds: dict[str, list[dict[str, Any]]] = {way: [] for way in ways}
    try:
        one_round(follower, "copy", before)  # the page cache as a replica's: the file hot
        for _ in range(args.rounds):
            for way in ways:
                os.sync()  # each round starts with nothing dirty to flush
                rounds[way].append(one_round(follower, way, before))
                print(json.dumps({way: rounds[way][-1]}), file=sys.stderr, flush=True)
    finally:
        follower.close()
        shutil.rmtree(own)
    median = {way: statistics.median(r["wall_s"] for r in got) for way, got in rounds.items()}
    base = median.get("copy")
    print(
        json.dumps(
            {
                "catalog_mb": round(args.catalog.stat().st_size / 2**20, 1),
                "workdir": str(args.workdir),
                "changed_blocks": args.changed,
                "rounds": rounds,
                "median_wall_s": median,
                "over_copy": {w: round(m / base, 3) for w, m in median.items()} if base else None,
                "load": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
