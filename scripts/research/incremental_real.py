"""Incremental reindex of 1,000 tools in a catalog with real(istic) vectors, once per toolcat
source tree, one after the other: the vectors of the tools whose id is 7 mod 1000 are deleted,
then ``toolcat reindex`` runs in a fresh process (wall and CPU seconds and peak RSS from
``/usr/bin/time``; the same 1,000 deleted before each run). Unlike
``scripts/bench_reindex.py --stale-at``, whose catalog holds random bytes as vectors, the
shortlist a large catalog's reindex saves (search/ann.py) is built from real vectors.

    python scripts/research/incremental_real.py /tmp/vec/c1m.db /work/main/src src
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIME = ["/usr/bin/time", "-f", "%e s wall, %U+%S s CPU, peak RSS %M KB"]


def main() -> None:
    db, sources = sys.argv[1], sys.argv[2:]
    for src in sources:
        conn = sqlite3.connect(db)
        conn.execute(
            "DELETE FROM embeddings WHERE content_hash IN "
            "(SELECT content_hash FROM tools WHERE id % 1000 = 7)"
        )
        conn.commit()
        conn.close()
        done = subprocess.run(
            [*TIME, sys.executable, "-m", "toolcat", "--db", db, "reindex"],
            env={**os.environ, "PYTHONPATH": str(Path(src).resolve())},
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        summary = done.stdout.strip().splitlines()[-1:]
        timed = done.stderr.strip().splitlines()[-1:]
        print(src, summary, timed, f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
