"""Benchmark the core catalog: registration, list mode, BM25 search, a cold CLI list.

BM25 is timed beside two peers in the same run, on the same tokenized text and queries:
tantivy (Rust, via its Python bindings) and bm25s (numpy/scipy sparse matrices), both from
the dev extra; ratios are toolcat's p50 over the peer's.

The workload is seeded and built from realistic tool text: the tools of ../shared/bench
when present (about 8,300 public tool definitions), else the sample catalog, repeated with
numbered names to reach each size. Queries are real benchmark queries (or tool
descriptions), drawn with the same seed.

    python scripts/bench_catalog.py                 # 1k, 10k, 100k tools
    python scripts/bench_catalog.py --sizes 1000 --json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from toolcat import Catalog, Tool, Toolkit  # noqa: E402
from toolcat.registry.manifest import load_manifests  # noqa: E402
from toolcat.search import bm25  # noqa: E402
from toolcat.store.reader import Filters  # noqa: E402

BENCH = ROOT.parent / "shared" / "bench"
TOOLS_PER_TOOLKIT = 50
SEED = 20261121


def tool_pool() -> tuple[list[dict[str, Any]], list[str]]:
    """(tool definitions, queries) of realistic text."""
    tools: list[dict[str, Any]] = []
    queries: list[str] = []
    if BENCH.is_dir():
        for source in sorted(BENCH.iterdir()):
            if not (source / "tools.jsonl").exists():
                continue
            for line in (source / "tools.jsonl").read_text().splitlines():
                raw = json.loads(line)
                tools.append(
                    {
                        "name": re.sub(r"[^A-Za-z0-9_-]+", "_", raw["name"])[:56] or "tool",
                        "description": raw["description"].strip() or raw["name"],
                        "parameters": raw["parameters"]
                        if raw["parameters"].get("type") == "object"
                        else {"type": "object", "properties": {}},
                        "tags": [
                            t[:64]
                            for t in raw.get("tags", [])[:5]
                            if isinstance(t, str) and t.strip()
                        ],
                    }
                )
            for line in (source / "queries.jsonl").read_text().splitlines()[:300]:
                queries.append(json.loads(line)["query"])
    else:
        for toolkit, _ in load_manifests([ROOT / "data" / "toolkits"]):
            for tool in toolkit.tools:
                tools.append(tool.model_dump(include={"name", "description", "parameters", "tags"}))
                queries.append(tool.description)
    return [t for t in tools if _valid(t)], queries


def _valid(tool: dict[str, Any]) -> bool:
    """Some public definitions carry invalid JSON Schema; the benchmark leaves them out."""
    try:
        Tool.model_validate(tool)
    except ValueError:
        return False
    return True


def make_toolkits(pool: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    order = list(range(len(pool)))
    rng.shuffle(order)
    toolkits = []
    for start in range(0, size, TOOLS_PER_TOOLKIT):
        tools = []
        for i in range(start, min(start + TOOLS_PER_TOOLKIT, size)):
            base = pool[order[i % len(pool)]]
            lap = i // len(pool)
            tool = dict(base)
            tool["name"] = f"{base['name']}_{i}"
            if lap:
                tool["description"] = f"{base['description']} (variant {lap})"
            tool["defer_loading"] = i % 3 == 0
            tools.append(tool)
        toolkits.append(
            {
                "toolkit": f"kit{start // TOOLS_PER_TOOLKIT:05d}",
                "version": "1.0.0",
                "description": f"Benchmark toolkit {start // TOOLS_PER_TOOLKIT}",
                "tags": ["bench", "even" if (start // TOOLS_PER_TOOLKIT) % 2 == 0 else "odd"],
                "tools": tools,
            }
        )
    return toolkits


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
    }


def timed(fn: Any, runs: list[Any]) -> list[float]:
    samples = []
    for arg in runs:
        start = time.perf_counter()
        fn(arg)
        samples.append(time.perf_counter() - start)
    return samples


def agreement(queries: list[str], fast: Any, exact: Any) -> dict[str, float]:
    """How often the two-phase ranking agrees with scoring every matching row."""
    top1 = overlap = 0.0
    for q in queries:
        a, b = [r for r, _ in fast(q)], [r for r, _ in exact(q)]
        top1 += a[:1] == b[:1]
        overlap += len(set(a) & set(b)) / max(len(b), 1)
    return {
        "two_phase_top1_agreement": round(top1 / len(queries), 3),
        "two_phase_top10_overlap": round(overlap / len(queries), 3),
    }


def raw_fts(conn: sqlite3.Connection, query: str) -> None:
    """The plain FTS5 query our search starts from: every query term ORed, top 10."""
    from toolcat.search.tokenize import tokenize

    terms = list(dict.fromkeys(tokenize(query)))
    if terms:
        conn.execute(
            "SELECT rowid, bm25(tools_fts, 4, 2, 1.5, 0.5, 0.5) AS s FROM tools_fts "
            "WHERE tools_fts MATCH ? ORDER BY s LIMIT 10",
            (bm25.match_expression(terms),),
        ).fetchall()


def peer_bm25(conn: sqlite3.Connection, queries: list[str]) -> dict[str, Any]:
    """tantivy and bm25s over the catalog's own tokenized text (one field, all columns),
    asked the same queries with the same tokenizer, top 10."""
    from toolcat.search.tokenize import tokenize

    rows = conn.execute(
        "SELECT rowid, name, hint, description, params, tags FROM tools_fts"
    ).fetchall()
    terms = [list(dict.fromkeys(tokenize(q))) for q in queries]
    out: dict[str, Any] = {}
    try:
        import tantivy
    except ImportError:
        out["tantivy"] = "not installed: pip install -e '.[dev]'"
    else:
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("id", stored=True, fast=True)
        builder.add_text_field("body", stored=False, tokenizer_name="whitespace")
        index = tantivy.Index(builder.build())
        writer = index.writer(heap_size=200_000_000, num_threads=1)
        for row in rows:
            writer.add_document(tantivy.Document(id=row[0], body=" ".join(c for c in row[1:] if c)))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        searcher = index.searcher()
        parsed = {}
        for ts in terms:
            key = " ".join(ts)
            if ts and key not in parsed:
                parsed[key] = tantivy.Query.boolean_query(
                    [
                        (tantivy.Occur.Should, tantivy.Query.term_query(index.schema, "body", t))
                        for t in ts
                    ]
                )

        def ask_tantivy(ts: list[str]) -> None:
            if ts:
                searcher.search(parsed[" ".join(ts)], 10).hits  # noqa: B018

        out["tantivy"] = percentiles(timed(ask_tantivy, terms))
    try:
        import bm25s
    except ImportError:
        out["bm25s"] = "not installed: pip install -e '.[dev]'"
    else:
        corpus = [" ".join(c for c in row[1:] if c).split() for row in rows]
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)

        def ask_bm25s(ts: list[str]) -> None:
            known = [t for t in ts if t in retriever.vocab_dict]
            if known:
                retriever.retrieve([known], k=10, show_progress=False, n_threads=1)

        out["bm25s"] = percentiles(timed(ask_bm25s, terms))
    return out


def bench_size(
    size: int, pool: list[dict[str, Any]], queries: list[str], workdir: Path
) -> dict[str, Any]:
    db = workdir / f"catalog-{size}.db"
    raw = make_toolkits(pool, size)
    start = time.perf_counter()
    toolkits = [Toolkit.model_validate(t) for t in raw]
    validated = time.perf_counter()
    with Catalog(db) as catalog:
        catalog.register(*toolkits)
        written = time.perf_counter()
        rng = random.Random(SEED)
        qs = [rng.choice(queries) for _ in range(300)]
        for q in qs[:20]:  # warm the page cache
            catalog.search(q)
        conn = sqlite3.connect(db)
        stats = bm25.TermStats()
        stats.refresh(conn, catalog.revision)
        short = [" ".join(q.split()[:4]) for q in qs]

        def one_phase(q: str) -> list[tuple[int, float]]:
            return bm25.search(conn, q, Filters(), 10, stats, exact_postings=10**12)

        warm_bm25 = percentiles(timed(lambda q: catalog.search(q, k=10, mode="bm25"), qs))
        peers = peer_bm25(conn, qs)
        result: dict[str, Any] = {
            "tools": size,
            "register_s": round(written - start, 3),
            "validate_s": round(validated - start, 3),
            "write_s": round(written - validated, 3),
            "register_tools_per_s": round(size / (written - start)),
            "list": percentiles(timed(lambda _: catalog.list(limit=50), range(300))),
            "list_tag_filter": percentiles(
                timed(lambda _: catalog.list(tags=["bench", "odd"], limit=50), range(300))
            ),
            "search": percentiles(timed(lambda q: catalog.search(q, k=10), qs)),
            "search_filtered": percentiles(
                timed(lambda q: catalog.search(q, k=10, tags=["odd"]), qs)
            ),
            "bm25_warm": warm_bm25,
            **peers,
            "bm25_over_tantivy": round(
                warm_bm25["p50_ms"] / max(peers["tantivy"]["p50_ms"], 1e-9), 2
            )
            if "tantivy" in peers
            else None,
            "raw_fts5": percentiles(timed(lambda q: raw_fts(conn, q), qs)),
            "bm25_module": percentiles(
                timed(lambda q: bm25.search(conn, q, Filters(), 10, stats), qs)
            ),
            "bm25_one_phase": percentiles(timed(lambda q: one_phase(q), qs)),
            "short_queries": percentiles(timed(lambda q: catalog.search(q, k=10), short)),
            **agreement(qs, lambda q: bm25.search(conn, q, Filters(), 10, stats), one_phase),
        }
        conn.close()
    result["search_over_raw_fts5"] = round(
        result["search"]["p50_ms"] / max(result["raw_fts5"]["p50_ms"], 1e-9), 2
    )
    if size <= 1000:
        result["cold_cli"] = cold_cli(db, qs[0])
    return result


def cold_cli(db: Path, query: str, runs: int = 21) -> dict[str, Any]:
    """Fresh `toolcat` processes beside a bare `python -c pass`: p50 of interleaved runs (so
    load hits every command alike) and each command's ratio to the bare start.

    Timed as installed: toolcat's bytecode is compiled first, as `pip install` does (an
    editable checkout run with PYTHONDONTWRITEBYTECODE=1, as here, would otherwise compile
    every module from source at every start). `list_json_no_bytecode` runs the same list from
    a copy of the sources without bytecode, to show that cost.
    """
    import compileall
    import os
    import shutil

    package = ROOT / "src" / "toolcat"
    compileall.compile_dir(package, quiet=1)
    bare = Path(tempfile.mkdtemp()) / "src"
    shutil.copytree(package, bare / "toolcat", ignore=shutil.ignore_patterns("__pycache__"))
    toolcat = [sys.executable, "-m", "toolcat", "--db", str(db)]
    no_pyc = {**os.environ, "PYTHONPATH": str(bare), "PYTHONDONTWRITEBYTECODE": "1"}
    commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "python_c_pass": ([sys.executable, "-c", "pass"], None),
        "list_json": ([*toolcat, "list", "--json"], None),
        "help": ([sys.executable, "-m", "toolcat", "--help"], None),
        "search_bm25": ([*toolcat, "search", query, "--mode", "bm25"], None),
        "list_json_no_bytecode": ([*toolcat, "list", "--json"], no_pyc),
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    try:
        for _ in range(runs):
            for name, (cmd, env) in commands.items():
                start = time.perf_counter()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
                samples[name].append(time.perf_counter() - start)
    finally:
        shutil.rmtree(bare.parent)
    p50 = {name: statistics.median(s) * 1000 for name, s in samples.items()}
    base = p50["python_c_pass"]
    return {
        "runs": runs,
        "load_1min": round(os.getloadavg()[0], 2),
        **{f"{name}_p50_ms": round(v, 1) for name, v in p50.items()},
        **{f"{name}_over_python": round(v / base, 1) for name, v in p50.items() if v != base},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--json", action="store_true", help="Print JSON only.")
    args = parser.parse_args()
    pool, queries = tool_pool()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            result = bench_size(size, pool, queries, Path(tmp))
            results.append(result)
            if not args.json:
                print(json.dumps(result), flush=True)
    if args.json:
        print(json.dumps({"pool_tools": len(pool), "results": results}, indent=2))


if __name__ == "__main__":
    main()
