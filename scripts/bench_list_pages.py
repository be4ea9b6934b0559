"""Time the MCP server's first ``tools/list`` pages on a catalog with many listed tools.

Makes (or reuses) a catalog of ``--listed`` always-on tools (toolkits of 100 seeded tools),
then, in this process, opens ``CatalogServer`` on it and asks ``tools/list`` six times through
the MCP SDK's in-process client: the first answer builds the page, the rest are kept ones.
``--src`` measures the toolcat package under another checkout's ``src`` (run this script
once per checkout, alternated, to compare).

    python scripts/bench_list_pages.py --db /tmp/l30k.db --listed 30000 [--src OLD/src]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make(db: Path, listed: int) -> None:
    from toolcat import Catalog, Tool, Toolkit

    unit = {"type": "string", "description": "unit of the measure"}
    kits = [
        Toolkit(
            name=f"kit{k:03d}",
            version="1.0.0",
            tools=[
                Tool(
                    name=f"measure_{k}_{i}",
                    description=f"Measure quantity {i} of kind {k} in the lab",
                    parameters={"type": "object", "properties": {"unit": unit}},
                )
                for i in range(100)
            ],
        )
        for k in range(listed // 100)
    ]
    with Catalog(db) as catalog, catalog.bulk(save_index=False):
        catalog.register(kits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--listed", type=int, default=30_000)
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    args = parser.parse_args()
    sys.path.insert(0, str(args.src))
    import anyio
    from mcp import Client

    from toolcat import Catalog
    from toolcat.server.mcp import CatalogServer, ServeOptions

    if not args.db.exists():
        make(args.db, args.listed)
    server = CatalogServer(Catalog(args.db), ServeOptions(watch_interval=3600))
    times: list[float] = []

    async def ask() -> None:
        async with Client(server.server, mode="2026-07-28") as client:
            for _ in range(6):
                started = time.perf_counter()
                await client.list_tools(cache_mode="refresh")
                times.append(round((time.perf_counter() - started) * 1000, 1))

    anyio.run(ask)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "src": str(args.src),
                "first_ms": times[0],
                "then_ms": times[1:],
                "peak_rss_mb": round(peak, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
