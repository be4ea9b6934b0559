"""Where the MCP face's time goes, at a catalog's size (issue 32; docs/benchmarks.md, "The
serving face at 10k, 100k and 1M").

``ab``: two toolcat sources (``git archive REV src`` for the code before) serving the same
catalog over HTTP beside the bare SDK server, 16 clients, rounds alternating the two (the
order flipped every round), per request kind: each server's CPU per request, its capacity
against the bare server's trivial call, requests/s.

``parts``: in one process, what ``search_tools`` does besides ``Catalog.search``, step by
step on new queries (CPU p50): the search as the server asks it, ``short_names`` of the
hits within the server's scope, the hits' entries, the JSON text.

    python scripts/research/mcp_face.py ab DB OLD/src NEW/src [--rounds 4]
    python scripts/research/mcp_face.py parts DB
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "src"))

import anyio  # noqa: E402

import load_mcp  # noqa: E402
from bench_scale import SEED, queries  # noqa: E402
from toolcat import Catalog  # noqa: E402

ERA = "2026-07-28"


def ab(db: Path, sources: dict[str, Path], kinds: list[str], rounds: int) -> dict[str, Any]:
    qs = queries(random.Random(SEED + 10_000), 400)[300:]
    with Catalog(db) as catalog:
        call = load_mcp.trivial_call(catalog)
    serve = [sys.executable, "-m", "toolcat.cli", "--db", str(db), "serve", "--http"]
    servers = {
        name: load_mcp.Served(name, [*serve, "--host", "127.0.0.1", "--mode", "bm25"], src)
        for name, src in sources.items()
    }
    bare_server = [sys.executable, str(ROOT / "scripts" / "bare_mcp_server.py")]
    servers["bare"] = load_mcp.Served("bare", bare_server)
    requests = load_mcp.toolcat_requests(qs, call)
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        for name in sources:  # first-request costs, out of the rounds
            for kind in kinds:
                anyio.run(load_mcp.load_round, servers[name], ERA, requests[kind], 16, 10)
        order = list(sources)
        for _ in range(rounds):
            bare = load_mcp.BARE[load_mcp.TRIVIAL]
            rows.setdefault("bare", []).append(
                anyio.run(load_mcp.load_round, servers["bare"], ERA, bare, 16, 20)
            )
            for kind in kinds:
                for name in order:
                    rows.setdefault(f"{name} {kind}", []).append(
                        anyio.run(load_mcp.load_round, servers[name], ERA, requests[kind], 16, 20)
                    )
            order.reverse()
    finally:
        for served in servers.values():
            served.stop()
    floor = statistics.median(r["server_cpu_ms_per_request"] for r in rows["bare"])
    return {
        name: {
            "cpu_ms_per_request": statistics.median(r["server_cpu_ms_per_request"] for r in rs),
            "each_round": [r["server_cpu_ms_per_request"] for r in rs],
            "capacity_vs_bare_call": round(
                floor / statistics.median(r["server_cpu_ms_per_request"] for r in rs), 3
            ),
            "rps": statistics.median(r["rps"] for r in rs),
        }
        for name, rs in rows.items()
    }


def parts(db: Path) -> dict[str, float]:
    from toolcat.server.mcp import ANONYMOUS, FoundTools, payload_text
    from toolcat.server.scope import Scope

    qs = queries(random.Random(SEED + 77), 350)
    scope, entries = Scope(), FoundTools()
    cpu: dict[str, list[float]] = {}

    def timed(step: str, started: float) -> None:
        cpu.setdefault(step, []).append(time.thread_time() - started)

    with load_mcp.warmed_catalog(db, qs[:50]) as catalog:
        for query in qs[50:]:
            started = time.thread_time()
            found = catalog.search(
                query,
                k=load_mcp.K,
                mode="bm25",
                policies=scope.search_policies,
                principal=ANONYMOUS,
            )
            timed("search", started)
            tools = [hit.tool for hit in found.hits]
            started = time.thread_time()
            names = catalog.short_names(tools, within=scope) if tools else {}
            timed("short_names", started)
            started = time.thread_time()
            found_entries = [entries.entry(t, names[t.id]) for t in tools]
            payload = {
                "query": query,
                "mode": found.mode,
                "no_match": found.no_match,
                "tools": [
                    {**entry, "score": round(h.score, 4), "match": h.match}
                    for h, (entry, _) in zip(found.hits, found_entries, strict=True)
                ],
            }
            timed("entries", started)
            started = time.thread_time()
            payload_text(payload, [head for _, head in found_entries])
            timed("json_text", started)
    return {f"{step}_cpu_p50_ms": round(statistics.median(v) * 1000, 3) for step, v in cpu.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    compare = sub.add_parser("ab")
    compare.add_argument("db", type=Path)
    compare.add_argument("before", type=Path, help="the toolcat sources before (a src folder)")
    compare.add_argument("after", type=Path, help="the toolcat sources after")
    compare.add_argument("--kinds", default=f"{load_mcp.TRIVIAL},search_tools")
    compare.add_argument("--rounds", type=int, default=4)
    steps = sub.add_parser("parts")
    steps.add_argument("db", type=Path)
    args = parser.parse_args()
    if args.command == "ab":
        kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
        sources = {"before": args.before.resolve(), "after": args.after.resolve()}
        print(json.dumps(ab(args.db, sources, kinds, max(1, args.rounds)), indent=1))
    else:
        print(json.dumps(parts(args.db)))


if __name__ == "__main__":
    main()
