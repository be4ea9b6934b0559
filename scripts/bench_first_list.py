"""A first ``toolcat list`` in a fresh process, for two (or more) toolcat source trees side by
side: each command of each tree once per round, rounds alternated, wall and CPU time per
process, beside ``python -c pass``; medians, p90 and the load before and after.

    python scripts/bench_first_list.py --db /work/scale/c1m.db --src OLD/src --src src

Each tree's modules are compiled to ``__pycache__`` first (``compileall``): where
``PYTHONDONTWRITEBYTECODE`` is set, a checkout without them would compile every module in
every run, as no installed toolcat does.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "list --json": ["list", "--json"],
    "list": ["list"],
    "--debug list --json": ["--debug", "list", "--json"],  # a global option: click parses it
    "status --json": ["status", "--json"],
    "--help": ["--help"],
}


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="The catalog (only read).")
    parser.add_argument("--src", action="append", required=True, help="A toolcat src folder.")
    parser.add_argument("--runs", type=int, default=21, help="Rounds (default 21).")
    parser.add_argument(
        "--only", nargs="*", choices=list(COMMANDS), help="These commands (default: all)."
    )
    args = parser.parse_args()
    for src in args.src:
        compileall.compile_dir(src, quiet=1)
    cases: dict[str, tuple[list[str], str | None]] = {"python -c pass": (["-c", "pass"], None)}
    for name in args.only or COMMANDS:
        for src in args.src:
            cases[f"{src}: {name}"] = (["-m", "toolcat", "--db", args.db, *COMMANDS[name]], src)
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    before = os.getloadavg()
    for _ in range(args.runs):
        for name, (argv, src) in cases.items():
            env = dict(os.environ)
            if src is not None:
                env["PYTHONPATH"] = src
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([sys.executable, *argv], env=env, stdout=subprocess.DEVNULL, check=False)
            wall[name].append((time.perf_counter() - start) * 1000)
            done = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append((done.ru_utime + done.ru_stime - used.ru_utime - used.ru_stime) * 1000)
    after = os.getloadavg()
    width = max(map(len, cases))
    for name in cases:
        print(
            f"{name:<{width}}  wall median {statistics.median(wall[name]):6.1f} ms, "
            f"p90 {p90(wall[name]):6.1f}, min {min(wall[name]):6.1f}; "
            f"CPU median {statistics.median(cpu[name]):6.1f} ms"
        )
    print(f"{args.runs} rounds; load {before[0]:.2f} before, {after[0]:.2f} after")


if __name__ == "__main__":
    main()
