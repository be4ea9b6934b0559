"""Benchmark calling tools: the first call (import + validator) and the warm overhead.

Warm overhead is ``Catalog.call`` on a trivial tool minus calling the function directly,
measured in the same run, for both isolations (``thread``: a pool thread; ``process``: a
worker subprocess over a pipe); the first call is measured in fresh processes, since a module
is imported once per process, and the process isolation's worker start in fresh catalogs.
Arguments are drawn from a seeded generator so runs are comparable.

    python scripts/bench_call.py [--calls 5000] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from toolcat import Catalog  # noqa: E402
from toolcat.registry.python import toolkit_from_module  # noqa: E402

FIRST_CALL = """
import sys, time, json
sys.path.insert(0, {root!r})
from toolcat import Catalog
catalog = Catalog({db!r})
start = time.perf_counter()
result = catalog.call("add", {{"a": 1, "b": 2}})
first = time.perf_counter() - start
start = time.perf_counter()
catalog.call("add", {{"a": 1, "b": 2}})
second = time.perf_counter() - start
assert result.data == 3, result
print(json.dumps([first, second]))
"""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def measure(db: str, isolation: str, pairs: list[tuple[int, int]]) -> dict[str, float]:
    from tests.fixtures.tools import add

    us = 1e6
    with Catalog(db, isolation=isolation) as catalog:  # type: ignore[arg-type]
        catalog.call("add", {"a": 1, "b": 2})  # warm: imported, validator compiled, worker up
        direct, through, default_filled = [], [], []
        for a, b in pairs:
            start = time.perf_counter()
            add(a=a, b=b)
            direct.append(time.perf_counter() - start)
            start = time.perf_counter()
            result = catalog.call("add", {"a": a, "b": b})
            through.append(time.perf_counter() - start)
            start = time.perf_counter()
            catalog.call("fixtures.add", {"a": a})
            default_filled.append(time.perf_counter() - start)
            assert result.data == a + b, result
    starts = []
    for _ in range(3 if isolation == "process" else 0):
        with Catalog(db, isolation=isolation) as catalog:  # type: ignore[arg-type]
            start = time.perf_counter()
            catalog.call("add", {"a": 1, "b": 2})
            starts.append(time.perf_counter() - start)
    out = {
        "call_p50_us": round(statistics.median(through) * us, 1),
        "call_p99_us": round(percentile(through, 0.99) * us, 1),
        "warm_overhead_p50_us": round(
            (statistics.median(through) - statistics.median(direct)) * us, 1
        ),
        "call_with_default_filled_p50_us": round(statistics.median(default_filled) * us, 1),
        "direct_p50_us": round(statistics.median(direct) * us, 2),
    }
    if starts:
        out["first_call_with_worker_start_p50_ms"] = round(statistics.median(starts) * 1000, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    pairs = [(rng.randint(-1000, 1000), rng.randint(-1000, 1000)) for _ in range(args.calls)]

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "calls.db")
        with Catalog(db) as catalog:
            catalog.register(toolkit_from_module("tests.fixtures.tools"))
        modes = {mode: measure(db, mode, pairs) for mode in ("thread", "process")}
        firsts = [
            json.loads(
                subprocess.run(
                    [sys.executable, "-c", FIRST_CALL.format(root=str(ROOT), db=db)],
                    check=True,
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                ).stdout
            )
            for _ in range(5)
        ]
    result: dict[str, object] = {
        "calls": args.calls,
        "seed": args.seed,
        **{f"{mode}_{key}": value for mode, found in modes.items() for key, value in found.items()},
        "first_call_p50_ms": round(statistics.median(f[0] for f in firsts) * 1000, 2),
        "second_call_in_new_process_p50_ms": round(
            statistics.median(f[1] for f in firsts) * 1000, 3
        ),
    }
    result["process_over_thread_p50"] = round(
        modes["process"]["call_p50_us"] / max(modes["thread"]["call_p50_us"], 1e-9), 2
    )
    print(json.dumps(result, indent=None if not args.json else 2))


if __name__ == "__main__":
    main()
