"""Benchmark the core catalog: registration, list mode, BM25 search, a cold CLI list.

BM25 is timed beside two peers in the same run, on the same tokenized text and queries:
tantivy (Rust, via its Python bindings) and bm25s (numpy/scipy sparse matrices), both from
the dev extra; ratios are toolcat's p50 over the peer's. The contenders are timed query by
query, interleaved, so a change in the machine's load hits them alike. What each includes:

- ``bm25_warm``: ``Catalog.search(q, k=10, mode="bm25")`` end to end in a process that has
  searched before (read transaction, revision check, tokenizing and stemming the query,
  ranking with the in-memory index, exact-name check, match signals, building the hits).
  ``search``: the same queries asked again (stems and built hits kept, still ranked);
  ``search_repeated``: and once more (the whole answers kept per revision).
  ``search_filtered`` / ``search_one_toolkit``: the same queries with a tag that half the
  tools have / within one toolkit of 50 tools, as a scoped caller asks (filters become the
  allowed row ids, kept per revision, and the in-memory index ranks within them), each
  query ranked (no kept answer). ``search_excluded_tag`` / ``search_any_tag``: the same half
  by the other tag rules (``exclude_tags``, ``any_tags``); ``list_any_not_filter`` likewise.
- ``bm25_core``: the in-memory index alone (search/lexical_index.py) given the query's index
  terms: tantivy's candidates and their exact FTS5 rescoring; ``postings_core``: the
  pure-Python fallback given the same terms.
- ``tantivy``: a pre-built query of the same terms (one field, every column, all of the
  query's terms) asked for its top 10 (``count=False``, as toolcat asks); query parsing and
  tokenizing are not timed. ``bm25s`` likewise.
- ``tantivy_catalog``: a tool catalog built on tantivy alone, asked as toolcat is: the
  request's raw text parsed with tantivy's English stemming tokenizer, its top 10, each hit's
  stored tool read and its JSON parsed (``bm25_over_tantivy_catalog``: end to end beside end
  to end).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from toolcat import Catalog, Tool, Toolkit  # noqa: E402
from toolcat.registry.manifest import load_manifests  # noqa: E402
from toolcat.search import bm25  # noqa: E402
from toolcat.search.postings import PostingsIndex  # noqa: E402
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
    else:  # figures from this workload do not compare with the benchmark's: say so
        print(f"note: {BENCH} not found, the workload is the sample catalog's", file=sys.stderr)
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


def agreement(
    queries: list[str], fast: Any, exact: Any, prefix: str = "two_phase"
) -> dict[str, float]:
    """How often a ranking agrees with scoring every matching row in FTS5: same best tool,
    the same top 10 in the same order, and the share of the exact top 10 it returns."""
    top1 = same = overlap = 0.0
    for q in queries:
        a, b = [r for r, _ in fast(q)], [r for r, _ in exact(q)]
        top1 += a[:1] == b[:1]
        same += a == b
        overlap += len(set(a) & set(b)) / max(len(b), 1)
    return {
        f"{prefix}_top1_agreement": round(top1 / len(queries), 3),
        f"{prefix}_top10_identical": round(same / len(queries), 3),
        f"{prefix}_top10_overlap": round(overlap / len(queries), 3),
    }


def lexical_costs(db: Path, queries: list[str], conn: sqlite3.Connection) -> dict[str, Any]:
    """What the in-memory index costs a fresh process: the first query (FTS5), the query
    that builds the index, and each index's build alone (inside one read transaction)."""
    from toolcat.search.engine import POSTINGS_AFTER
    from toolcat.search.lexical_index import TantivyIndex, tantivy_module
    from toolcat.search.postings import PostingsIndex

    out: dict[str, Any] = {}
    with Catalog(db) as fresh:
        start = time.perf_counter()
        fresh.search(queries[0], k=10, mode="bm25")
        out["first_query_ms"] = round((time.perf_counter() - start) * 1000, 2)
        for q in queries[1 : POSTINGS_AFTER - 1]:
            fresh.search(q, k=10, mode="bm25")
        start = time.perf_counter()
        fresh.search(queries[POSTINGS_AFTER - 1], k=10, mode="bm25")
        out["index_building_query_ms"] = round((time.perf_counter() - start) * 1000, 2)
        out["index_backend"] = fresh._search.postings.backend
    builds = [("postings_build_s", PostingsIndex)]
    if tantivy_module() is not None:
        builds.insert(0, ("tantivy_index_build_s", TantivyIndex))
    revision = int(conn.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()[0])
    for key, kind in builds:
        conn.execute("BEGIN")
        start = time.perf_counter()
        kind().build(conn, revision, bm25.DEFAULT_WEIGHTS)
        out[key] = round(time.perf_counter() - start, 3)
        conn.execute("COMMIT")
    return out


def raw_fts(conn: sqlite3.Connection, query: str) -> None:
    """The plain FTS5 query our search starts from: every query term ORed, top 10."""
    from toolcat.text.tokenize import tokenize

    terms = list(dict.fromkeys(tokenize(query)))
    if terms:
        conn.execute(
            "SELECT rowid, bm25(tools_fts, 4, 2, 1.5, 0.5, 0.5) AS s FROM tools_fts "
            "WHERE tools_fts MATCH ? ORDER BY s LIMIT 10",
            (bm25.match_expression(terms),),
        ).fetchall()


def peer_bm25(conn: sqlite3.Connection) -> tuple[dict[str, Any], dict[str, Any]]:
    """tantivy and bm25s over the catalog's own tokenized text (one field, all columns):
    ({name: (prepare, ask)}, {name: why it is missing}). ``prepare(q)`` tokenizes ``q`` with
    our tokenizer and builds the peer's query (not timed); ``ask(prepared)`` is timed."""
    from toolcat.text.tokenize import tokenize

    rows = conn.execute(
        "SELECT rowid, name, hint, description, params, tags FROM tools_fts"
    ).fetchall()
    peers: dict[str, Any] = {}
    missing: dict[str, Any] = {}
    try:
        import tantivy
    except ImportError:
        missing["tantivy"] = "not installed: pip install -e '.[dev]'"
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

        def prepare_tantivy(q: str) -> Any:
            terms = list(dict.fromkeys(tokenize(q)))
            return (
                tantivy.Query.boolean_query(
                    [
                        (tantivy.Occur.Should, tantivy.Query.term_query(index.schema, "body", t))
                        for t in terms
                    ]
                )
                if terms
                else None
            )

        def ask_tantivy(query: Any) -> None:
            if query is not None:
                searcher.search(query, 10, count=False).hits  # noqa: B018

        peers["tantivy"] = (prepare_tantivy, ask_tantivy)
        peers["tantivy_catalog"] = tantivy_catalog(conn, rows)
    try:
        import bm25s
    except ImportError:
        missing["bm25s"] = "not installed: pip install -e '.[dev]'"
    else:
        corpus = [" ".join(c for c in row[1:] if c).split() for row in rows]
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)

        def prepare_bm25s(q: str) -> list[str]:
            return [t for t in dict.fromkeys(tokenize(q)) if t in retriever.vocab_dict]

        def ask_bm25s(known: list[str]) -> None:
            if known:
                retriever.retrieve([known], k=10, show_progress=False, n_threads=1)

        peers["bm25s"] = (prepare_bm25s, ask_bm25s)
    return peers, missing


def tantivy_catalog(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> tuple[Any, Any]:
    """A tool catalog a user could build on tantivy alone, asked end to end as toolcat is:
    the request's raw text parsed by tantivy (its English stemming tokenizer), its top 10,
    and each hit's stored tool (name, toolkit, definition JSON) read and parsed. What it
    leaves out that toolcat does: filters, versions, the exact-name check, match signals."""
    import tantivy

    tools = {
        row[0]: json.dumps({"name": row[1], "toolkit": row[2], "definition": json.loads(row[3])})
        for row in conn.execute("SELECT t.id, t.name, t.toolkit, t.definition FROM tools t")
    }
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
    builder.add_text_field("tool", stored=True, index_option="basic", tokenizer_name="raw")
    index = tantivy.Index(builder.build())
    writer = index.writer(heap_size=200_000_000, num_threads=1)
    for row in rows:
        body = " ".join(c for c in row[1:] if c)
        writer.add_document(tantivy.Document(body=body, tool=tools[row[0]]))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()

    def ask(text: str) -> list[dict[str, Any]]:
        query, _errors = index.parse_query_lenient(text, ["body"])
        hits = searcher.search(query, 10, count=False).hits
        return [json.loads(searcher.doc(address)["tool"][0]) for _score, address in hits]

    return (lambda text: text), ask


def bm25_beside_peers(
    catalog: Catalog, conn: sqlite3.Connection, qs: list[str]
) -> tuple[dict[str, Any], Any]:
    """Every BM25 contender timed query by query, interleaved (so a change in the machine's
    load hits all of them alike): toolcat end to end, its ranking core, the pure-Python
    fallback's core, tantivy, bm25s. Each query is first asked end to end, so the
    tokenizer meets its words there first, as a new query would, and ranked (the engine's
    kept answers, which repeated queries get, are dropped before each: ``search`` below
    times repeated queries)."""
    lexical = catalog._search.postings.index  # built by the warm-up searches
    assert lexical is not None and lexical.current(catalog.revision, bm25.DEFAULT_WEIGHTS)
    fallback = PostingsIndex()
    conn.execute("BEGIN")
    fallback.build(conn, catalog.revision, bm25.DEFAULT_WEIGHTS)
    conn.execute("COMMIT")
    peers, missing = peer_bm25(conn)
    rounds_before = dict(getattr(lexical, "rounds", {}))
    samples: dict[str, list[float]] = {
        name: [] for name in ("bm25_warm", "bm25_core", "postings_core", *peers)
    }
    answers = catalog._search.answers
    for q in qs:
        answers.clear()  # ranked, not a kept answer (the warm-up and repeats asked some)
        start = time.perf_counter()
        catalog.search(q, k=10, mode="bm25")
        samples["bm25_warm"].append(time.perf_counter() - start)
        terms = lexical.terms(q, bm25.MAX_QUERY_TERMS)
        for name, index in (("bm25_core", lexical), ("postings_core", fallback)):
            start = time.perf_counter()
            index.rank(terms, 10)
            samples[name].append(time.perf_counter() - start)
        for name, (prepare, ask) in peers.items():
            prepared = prepare(q)
            start = time.perf_counter()
            ask(prepared)
            samples[name].append(time.perf_counter() - start)
    rounds = {n: c - rounds_before.get(n, 0) for n, c in getattr(lexical, "rounds", {}).items()}
    out: dict[str, Any] = {name: percentiles(times) for name, times in samples.items()}
    if "tantivy" in peers:
        # The same two back to back, each over all the queries in a row (warm CPU caches
        # favour the faster one): a second view of the core's ratio.
        prepare, ask = peers["tantivy"]
        prepared = [prepare(q) for q in qs]
        terms = [lexical.terms(q, bm25.MAX_QUERY_TERMS) for q in qs]
        core_batch = percentiles(timed(lambda t: lexical.rank(t, 10), terms))
        tantivy_batch = percentiles(timed(ask, prepared))
        out["bm25_core_in_a_row"], out["tantivy_in_a_row"] = core_batch, tantivy_batch
        out["bm25_core_over_tantivy_in_a_row"] = ratio(core_batch, tantivy_batch["p50_ms"])
    out.update(missing)
    tantivy_p50 = out["tantivy"]["p50_ms"] if "tantivy" in peers else None
    if "tantivy_catalog" in peers:
        out["bm25_over_tantivy_catalog"] = ratio(out["bm25_warm"], out["tantivy_catalog"]["p50_ms"])
    out.update(
        {
            "bm25_core_backend": type(lexical).__name__,
            # Queries (end to end and core, so each twice) by tantivy rounds needed to
            # certify the exact top 10 (0: not certified, best effort).
            "bm25_core_rounds": {str(n): c for n, c in sorted(rounds.items()) if c},
            "bm25_over_tantivy": ratio(out["bm25_warm"], tantivy_p50),
            "bm25_core_over_tantivy": ratio(out["bm25_core"], tantivy_p50),
            "postings_core_over_tantivy": ratio(out["postings_core"], tantivy_p50),
        }
    )
    return out, lexical


def ranked(catalog: Catalog, **filters: Any) -> Callable[[str], Any]:
    """A search with these filters that ranks every query (no kept answer)."""
    answers = catalog._search.answers

    def ask(q: str) -> Any:
        answers.clear()
        return catalog.search(q, k=10, **filters)

    return ask


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
        catalog._search.postings.wait()  # the in-memory index builds in the background
        catalog.search(qs[0])
        conn = sqlite3.connect(db)
        stats = bm25.TermStats()
        stats.refresh(conn, catalog.revision)
        short = [" ".join(q.split()[:4]) for q in qs]

        def one_phase(q: str) -> list[tuple[int, float]]:
            return bm25.search(conn, q, Filters(), 10, stats, exact_postings=10**12)

        bm25_figures, lexical = bm25_beside_peers(catalog, conn, qs)
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
            # The same queries once more: unfiltered BM25 answers are kept per revision.
            "search_repeated": percentiles(timed(lambda q: catalog.search(q, k=10), qs)),
            # Filtered: half the tools (a tag), then one toolkit's (as a scoped MCP caller).
            "search_filtered": percentiles(timed(ranked(catalog, tags=["odd"]), qs)),
            "search_one_toolkit": percentiles(timed(ranked(catalog, toolkit="kit00001"), qs)),
            # The same halves by the other tag rules: any of, none of.
            "list_any_not_filter": percentiles(
                timed(
                    lambda _: catalog.list(
                        any_tags=["odd", "nosuch"], exclude_tags=["even"], limit=50
                    ),
                    range(300),
                )
            ),
            "search_excluded_tag": percentiles(timed(ranked(catalog, exclude_tags=["even"]), qs)),
            "search_any_tag": percentiles(timed(ranked(catalog, any_tags=["odd", "nosuch"]), qs)),
            **bm25_figures,
            **agreement(
                qs, lambda q: lexical.search(q, 10, bm25.MAX_QUERY_TERMS), one_phase, "lexical"
            ),
            **lexical_costs(db, qs, conn),
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


def ratio(ours: dict[str, float], peer_p50: float | None) -> float | None:
    return round(ours["p50_ms"] / max(peer_p50, 1e-9), 2) if peer_p50 else None


def import_ms(module: str) -> float | None:
    """Cumulative import time of ``module`` in a fresh interpreter (-X importtime)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        return None
    last = [line for line in done.stderr.splitlines() if line.rstrip().endswith(f" {module}")]
    return round(int(last[-1].split("|")[1]) / 1000, 1) if last else None


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
    imports = {"tantivy_import_ms": import_ms("tantivy")}
    if not args.json:
        print(json.dumps(imports), flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            result = bench_size(size, pool, queries, Path(tmp))
            results.append(result)
            if not args.json:
                print(json.dumps(result), flush=True)
    if args.json:
        print(json.dumps({"pool_tools": len(pool), **imports, "results": results}, indent=2))


if __name__ == "__main__":
    main()
