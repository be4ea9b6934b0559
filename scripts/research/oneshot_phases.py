"""Where a cold one-shot ``toolcat search`` spends its wall time, beside another checkout.

Each run is a fresh ``python -m toolcat --db DB search QUERY -k 3 --json`` with its own
``PYTHONPATH``, wrapped so that the process reports three instants: when the interpreter is
ready to run toolcat (after its own start-up and ``site``), when toolcat's ``main`` has
returned (import + search + output), and — from the parent — when the process has exited.
So each run splits into start-up, toolcat, and exit (interpreter finalisation, atexit, thread
joins, native libraries' static destructors); beside each, the process's CPU time (user +
system, every thread: ``wait4`` for the whole, ``time.process_time`` inside for the split).
Variants run in a rotated order round by round; the load average is read before and after.

Bytecode: with ``PYTHONDONTWRITEBYTECODE=1`` (set on the team's machine) a source tree never
gets its ``__pycache__``, and every run compiles toolcat from source (a third of the
instructions of a one-shot search); ``--compile`` byte-compiles each variant's tree first, as
``pip install`` does, so that the runs time what users run.

    python scripts/research/oneshot_phases.py --variant old=/tmp/old/src:/tmp/old.db \\
        --variant now=src:/tmp/now.db [--env now-notel=now:ORT_DISABLE_TELEMETRY=1] \\
        [--rounds 21] [--query "erase an old document"]

``--env NAME=BASE:KEY=VALUE[,KEY=VALUE]`` adds a variant that is BASE with extra environment.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run in the child: time.time() when ready, run toolcat as ``python -m toolcat`` would, then
# time.time() when its main returned (or raised SystemExit), written to the file in argv[1].
WRAPPER = """
import sys, time
ready, ready_cpu = time.time(), time.process_time()
report, sys.argv = sys.argv[1], ["toolcat", *sys.argv[2:]]
import os, runpy
def done():
    with open(report, "w") as f:
        f.write(f"{ready} {time.time()} {ready_cpu} {time.process_time()}")
def leave(code, _exit=os._exit):  # toolcat may leave at once, without finally blocks
    done()
    _exit(code)
os._exit = leave
try:
    runpy.run_module("toolcat", run_name="__main__", alter_sys=True)
finally:
    done()
"""


def run(src: str, db: str, query: str, env: dict[str, str], report: Path) -> dict[str, float]:
    """One cold search; its phases in ms and its CPU time."""
    child_env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), **env}
    args = [sys.executable, "-c", WRAPPER, str(report), "--db", db, "search", query, "-k", "3"]
    start = time.time()
    process = subprocess.Popen(
        [*args, "--json"], env=child_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    end = time.time()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{src}: exit {process.returncode}: {process.stderr.read().decode()}")
    ready, done, ready_cpu, done_cpu = map(float, report.read_text().split())
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "wall": (end - start) * 1000,
        "start": (ready - start) * 1000,
        "toolcat": (done - ready) * 1000,
        "exit": (end - done) * 1000,
        "cpu": cpu * 1000,
        "cpu_start": ready_cpu * 1000,
        "cpu_toolcat": (done_cpu - ready_cpu) * 1000,
        "cpu_exit": (cpu - done_cpu) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", default=[], help="NAME=SRC:DB")
    parser.add_argument("--env", action="append", default=[], help="NAME=BASE:K=V[,K=V]")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--query", default="erase an old document")
    parser.add_argument("--compile", action="store_true", help="compileall each SRC first")
    args = parser.parse_args()

    variants: dict[str, tuple[str, str, dict[str, str]]] = {}
    for spec in args.variant:
        name, rest = spec.split("=", 1)
        src, db = rest.rsplit(":", 1)
        variants[name] = (src, db, {})
    for spec in args.env:
        name, rest = spec.split("=", 1)
        base, pairs = rest.split(":", 1)
        src, db, env = variants[base]
        extra = dict(p.split("=", 1) for p in pairs.split(","))
        variants[name] = (src, db, {**env, **extra})
    names = list(variants)
    if args.compile:
        import compileall

        for src in {v[0] for v in variants.values()}:
            compileall.compile_dir(src, quiet=1)
    samples: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report"
        for name in names:  # one unrecorded run each: page cache, digests, bytecode
            run(*variants[name][:2], args.query, variants[name][2], report)
        for i in range(args.rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                src, db, env = variants[name]
                samples[name].append(run(src, db, args.query, env, report))
    print(
        f"{args.rounds} rounds, load {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
        "median ms (wall = start + toolcat + exit)"
    )
    print("| variant | wall | start-up | toolcat | exit | CPU: all | start-up | toolcat | exit |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        med = {k: statistics.median(s[k] for s in samples[name]) for k in samples[name][0]}
        print(
            f"| {name} | {med['wall']:.1f} | {med['start']:.1f} | {med['toolcat']:.1f} | "
            f"{med['exit']:.1f} | {med['cpu']:.1f} | {med['cpu_start']:.1f} | "
            f"{med['cpu_toolcat']:.1f} | {med['cpu_exit']:.1f} |"
        )


if __name__ == "__main__":
    main()
