"""Benchmark what a PID namespace per worker costs: warm calls and worker starts, with the
namespace and without it (the subreaper alone), interleaved in a seeded order.

A warm call goes over the pipe to the worker itself (pid 2 of its namespace), so the
namespace should cost it nothing; a worker start pays one ``unshare`` and two extra forks.
Each sample is one request on a ``processes.Worker`` calling a trivial function.

    python scripts/bench_containment.py [--calls 200] [--starts 200] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from toolcat.runtime import containment, processes  # noqa: E402

NAMESPACE = processes.WORKER_ARGS
SUBREAPER_ONLY = containment.WORKER_WITHOUT_NAMESPACE
REQUEST = {
    "implementation": "os.path:basename",
    "tool_id": "bench.basename",
    "arguments": {"p": "/a/b"},
    "max_result_bytes": 1 << 20,
    "trusted": True,
}


def start_worker(args: tuple[str, ...]) -> processes.Worker:
    processes.WORKER_ARGS = args
    try:
        return processes.Worker()
    finally:
        processes.WORKER_ARGS = NAMESPACE


def call(worker: processes.Worker) -> float:
    start = time.perf_counter()
    reply = worker.request(REQUEST, deadline=time.monotonic() + 60, on_event=None)
    assert reply.get("ok") == "b", reply
    return time.perf_counter() - start


def cold(args: tuple[str, ...]) -> float:
    """A worker's start and its first call."""
    start = time.perf_counter()
    worker = start_worker(args)
    call(worker)
    elapsed = time.perf_counter() - start
    worker.stop()
    return elapsed


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--starts", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    rng = random.Random(options.seed)
    modes = {"namespace": NAMESPACE, "subreaper": SUBREAPER_ONLY}
    warm: dict[str, list[float]] = {mode: [] for mode in modes}
    starts: dict[str, list[float]] = {mode: [] for mode in modes}
    workers = {mode: start_worker(args) for mode, args in modes.items()}
    for worker in workers.values():
        call(worker)  # imports done before measuring
    order = [mode for mode in modes for _ in range(options.calls)]
    rng.shuffle(order)
    for mode in order:
        warm[mode].append(call(workers[mode]))
    for worker in workers.values():
        worker.stop()
    order = [mode for mode in modes for _ in range(options.starts)]
    rng.shuffle(order)
    for mode in order:
        starts[mode].append(cold(modes[mode]))
    report = {
        "containment": containment.probe(),
        "warm_call": {mode: summary(samples) for mode, samples in warm.items()},
        "worker_start": {mode: summary(samples) for mode, samples in starts.items()},
    }
    for kind in ("warm_call", "worker_start"):
        with_ns, without = report[kind]["namespace"], report[kind]["subreaper"]
        report[kind]["ratio_p50"] = with_ns["p50_ms"] / without["p50_ms"]
    if options.json:
        print(json.dumps(report, indent=2))
        return
    print(f"containment in force: {report['containment']}")
    for kind in ("warm_call", "worker_start"):
        row = report[kind]
        print(
            f"{kind:<12} namespace p50 {row['namespace']['p50_ms']:.3f} ms "
            f"(p90 {row['namespace']['p90_ms']:.3f}); subreaper p50 "
            f"{row['subreaper']['p50_ms']:.3f} ms (p90 {row['subreaper']['p90_ms']:.3f}); "
            f"ratio {row['ratio_p50']:.3f}"
        )


if __name__ == "__main__":
    main()
