"""Time the web console through HTTP at catalog scale: the first browse page, a tool page,
a playground search (BM25), the first toolkits page and the quality page, on catalogs of
generated tools (bench_scale.py's seeded generator over ../shared/bench).

Each size: a catalog is generated (or reused from --keep), ``toolcat ui --no-browser`` is
started on it, its one-time link is exchanged for a session, and each page is fetched
--runs times after one warm-up; the median and the slowest are printed as JSON.

    python scripts/bench_console.py --sizes 10000 100000
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

PAGES = {
    "browse_first_page": "/ui/",
    "browse_filtered": "/ui/?deferred=only&size=50",
    "tool_page": None,  # the first listed tool, found at run time
    "search_bm25": "/ui/search?q=get+the+weather+forecast+for+a+city&mode=bm25&k=10",
    "toolkits_page": "/ui/toolkits",
    "quality_page": "/ui/quality",
}


def timed(client: Any, path: str, runs: int) -> dict[str, float]:
    client.get(path).raise_for_status()  # warm-up
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        answer = client.get(path)
        samples.append((time.perf_counter() - started) * 1000)
        answer.raise_for_status()
    return {"median_ms": round(statistics.median(samples), 1), "max_ms": round(max(samples), 1)}


def bench(db: Path, runs: int) -> dict[str, Any]:
    import httpx

    process = subprocess.Popen(
        [sys.executable, "-m", "toolcat.cli", "--db", str(db), "ui", "--no-browser"],
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+)(/ui/login\?secret=\S+)", line)
        if not found:
            raise SystemExit(f"toolcat ui did not start: {line}")
        with httpx.Client(base_url=found.group(1), timeout=120) as client:
            assert client.get(found.group(2)).status_code == 303, "the one-time link failed"
            first = re.search(r'href="(/ui/tools/[^"]+)"', client.get("/ui/").text)
            assert first, "no tool listed"
            return {
                name: timed(client, path or first.group(1), runs) for name, path in PAGES.items()
            }
    finally:
        process.terminate()
        process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--keep", type=Path, help="Folder to keep (and reuse) the catalogs in.")
    args = parser.parse_args()
    from bench_scale import make_catalog

    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-console-"))
    folder.mkdir(parents=True, exist_ok=True)
    for size in args.sizes:
        db = folder / f"console-{size}.db"
        made = {"reused": str(db)} if db.exists() else make_catalog(size, db)
        print(json.dumps({"tools": size, **made, **bench(db, args.runs)}), flush=True)


if __name__ == "__main__":
    main()
