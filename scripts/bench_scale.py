"""Benchmark toolcat at catalog scale (100k and 1M tools) beside tantivy, bm25s and an
exact vector scan, in one run.

The catalog is generated, seeded, from the ~8,300 real tool definitions in ../shared/bench:

- each generated toolkit takes a real toolkit of one source (its tools in order, continuing
  into the next real toolkits of that source when it is short) and a *context*: another real
  toolkit, usually of another source, whose name and category become the toolkit's purpose;
- each tool keeps its real name, description and parameters, and gets the verbs and objects
  of a real tool of the context appended to its description ("... For Nager.Date: get all
  available countries.") and one of that tool's scalar parameters, so no two generated tools
  have the same text while every word is one a real tool uses;
- toolkit sizes follow a seeded log-normal (median 60, 10 to 400 tools); tags are the base
  tool's (up to 3), the context's category and a tier (``public`` 70%, ``partner`` 20%,
  ``internal`` 10%); every tool is deferred (the issue's "no always-on tools" list case),
  except the first toolkit, whose tools are the always-on ones.

What one run measures per size, each in a fresh child process so memory and first-use costs
are the process's own (``uptime`` load printed beside):

- ``register_s``: ``toolcat register DIR`` (the CLI) for each directory of manifests of
  2,500 tools, summed (the manifests are written beforehand and not timed), and
  ``register_cpu_s`` its CPU time (workers included), ``register_peak_rss_mb`` the largest
  resident size of those processes; ``--register-only one-call``: one
  ``toolcat register DIR...`` for every directory instead. Every call but the last passes
  ``--no-index``; the last saves the BM25 index. ``--index-apart``: the last one too, then
  ``save_s`` / ``save_cpu_s`` time that save alone, in a child process;
- ``first_list_ms``: ``toolcat list --json`` in a fresh process, beside ``python -c pass``;
  ``open_ms`` / ``status_ms`` / ``list_ms``: ``Catalog(path)``, ``status()`` and
  ``list(limit=50)`` timed inside a fresh process;
- ``bm25_first_300``: the first 300 BM25 queries (``Catalog.search(q, mode="bm25")``) right
  after opening, p50/p99; ``bm25_warm``: 300 other queries once the process has served
  ``--warm`` queries and its in-memory index is ready (each ranked, no kept answer);
- ``rss_mb``: the serving process's peak RSS after both;
- ``tantivy`` / ``bm25s``: the same queries' tokens over the same tokenized text, built and
  asked in another fresh process (top 10);
- ``vector_scan``: an exact top-10 scan of seeded random unit vectors (384 dims) as int8 and
  fp16, numpy, per query;
- ``mcp``: the serving face, ``toolcat serve --http`` beside a bare MCP SDK server
  (scripts/bare_mcp_server.py, same transport) in one run (``load_mcp.measure``): the first
  and kept ``tools/list`` (wall and server CPU), ``search_tools`` beside ``Catalog.search``
  of the same queries in the driving process, and 16 concurrent clients per request kind
  (a trivial call, ``search_tools`` over 100 queries, ``search_tools`` with a new query each
  time), rounds alternating the servers; ``targets`` sums up the issue's rows (capacity: the
  bare server's CPU per trivial call over toolcat's).

    python scripts/bench_scale.py --sizes 100000
    python scripts/bench_scale.py --sizes 100000 1000000 --json
    python scripts/bench_scale.py --sizes 1000000 --register-only [one-call]

Warm BM25 alone, in minutes instead of an hour (``--make-catalog`` registers the same
generated toolkits in process, not through the CLI, and skips an existing file; ``--bm25``
times one serving process's new queries beside tantivy alone in the same process, query by
query, interleaved):

    python scripts/bench_scale.py --sizes 100000 --make-catalog /tmp/scale-100k.db
    python scripts/bench_scale.py --sizes 100000 --catalog /tmp/scale-100k.db --bm25
    python scripts/bench_scale.py --sizes 100000 --catalog /tmp/scale-100k.db --mcp

One serving process with vectors (``--hybrid``): BM25 and hybrid p50/p99, RSS, the
embedding side through the shortlist beside the exact scan, tantivy beside BM25.
``--vectors`` first stores the synthesised vectors of scripts/research/ann_vectors.py into a
catalog that has none (embedding 1M tools here takes hours) and saves their shortlist through
``Catalog.reindex()``; ``--src`` measures another toolcat (the code before) the same way:

    python scripts/bench_scale.py --sizes 1000000 --make-catalog /tmp/vec/c1m.db
    python scripts/bench_scale.py --sizes 1000000 --catalog /tmp/vec/c1m.db --hybrid \
        --vectors /tmp/ann/vectors-1000000.npy
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT.parent / "shared" / "bench"
SEED = 20261125
TOOLS_PER_REGISTER = 2500
# The toolcat sources measured (--src: e.g. an older checkout's, for before/after); the
# generator itself always uses this checkout's.
SRC = Path(os.environ.get("BENCH_SCALE_SRC", ROOT / "src"))
TIERS = ("public",) * 7 + ("partner",) * 2 + ("internal",)
SCALAR = {"string", "integer", "number", "boolean"}


def slug(text: str, length: int = 24) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:length].strip("-") or "kit"


def real_toolkits() -> list[dict[str, Any]]:
    """The benchmark's real toolkits: {source, name, category, tools}, in file order (tools
    whose definitions toolcat refuses, such as invalid JSON Schema, left out)."""
    sys.path.insert(0, str(ROOT / "src"))
    from toolcat import Tool

    kits: dict[tuple[str, str], dict[str, Any]] = {}
    for source in sorted(p for p in BENCH.iterdir() if (p / "tools.jsonl").exists()):
        for line in (source / "tools.jsonl").read_text().splitlines():
            raw = json.loads(line)
            params = raw.get("parameters") or {}
            if params.get("type") != "object" or not isinstance(params.get("properties", {}), dict):
                continue
            name = re.sub(r"[^A-Za-z0-9_-]+", "_", raw["name"]).strip("_")[:48] or "tool"
            tags = [t for t in raw.get("tags", []) if isinstance(t, str) and t.strip()]
            kit = kits.setdefault(
                (source.name, raw.get("toolkit") or source.name),
                {
                    "source": source.name,
                    "name": raw.get("toolkit") or source.name,
                    "category": (tags[0].split("/")[0] if tags else source.name)[:40],
                    "tools": [],
                },
            )
            tool = {
                "name": name,
                "description": (raw.get("description") or raw["name"]).strip()[:1500],
                "parameters": params,
                "tags": [t[:60] for t in tags[:3]],
            }
            try:
                Tool.model_validate(tool)
            except ValueError:
                continue
            kit["tools"].append(tool)
    return [kit for kit in kits.values() if kit["tools"]]


def queries(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct real benchmark queries, seeded."""
    pool: list[str] = []
    for source in sorted(p for p in BENCH.iterdir() if (p / "queries.jsonl").exists()):
        pool += [
            json.loads(x)["query"] for x in (source / "queries.jsonl").read_text().splitlines()
        ]
    pool = sorted(set(q for q in pool if q.strip()))
    return rng.sample(pool, count)


def _phrase(tool: dict[str, Any]) -> str:
    """The verbs and objects of a real tool: its description's first sentence."""
    first = re.split(r"(?<=[.!?])\s", tool["description"], maxsplit=1)[0].rstrip(".!? ")
    return first[:200] or tool["name"].replace("_", " ")


def _context_param(tool: dict[str, Any], taken: dict[str, Any]) -> tuple[str, Any] | None:
    for key, schema in (tool["parameters"].get("properties") or {}).items():
        if (
            isinstance(schema, dict)
            and schema.get("type") in SCALAR
            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", key)
            and key not in taken
        ):
            kept = {"type": schema["type"]}
            if isinstance(schema.get("description"), str):
                kept["description"] = schema["description"][:300]
            return key, kept
    return None


def generate(
    size: int, seed: int = SEED, origins: list[tuple[int, int, int, int]] | None = None
) -> Iterator[dict[str, Any]]:
    """Toolkit manifests (dicts) holding ``size`` tools in all; deterministic for a seed.
    ``origins``, when given, gets each generated tool's (base toolkit, tool in it, context
    toolkit, tool in it), indexes into ``real_toolkits()``, in the order the tools are made
    (scripts/research/ann_candidates.py builds their vectors from the real tools')."""
    kits = real_toolkits()
    by_source: dict[str, list[int]] = {}
    for i, kit in enumerate(kits):
        by_source.setdefault(kit["source"], []).append(i)
    rng = random.Random(seed)
    names: dict[str, int] = {}
    made = 0
    index = 0
    while made < size:
        count = min(size - made, max(10, min(400, round(rng.lognormvariate(math.log(60), 0.8)))))
        base_i = rng.randrange(len(kits))
        context_i = rng.randrange(len(kits))
        context = kits[context_i]
        base = kits[base_i]
        name = f"{slug(base['name'])}-{slug(context['name'], 16)}"
        names[name] = names.get(name, 0) + 1
        if names[name] > 1:
            name = f"{name}-{names[name]}"
        # The base toolkit's tools in order, continuing into its source's next toolkits.
        siblings = by_source[base["source"]]
        at = siblings.index(base_i)
        tools: list[dict[str, Any]] = []
        used: set[str] = set()
        lap = 0
        while len(tools) < count:
            kit_i = siblings[at % len(siblings)]
            for tool_i, tool in enumerate(kits[kit_i]["tools"]):
                if len(tools) == count:
                    break
                other_i = rng.randrange(len(context["tools"]))
                other = context["tools"][other_i]
                tool_name = tool["name"] if tool["name"] not in used else f"{tool['name']}_{lap}"
                if tool_name in used:
                    continue
                used.add(tool_name)
                properties = dict(tool["parameters"].get("properties") or {})
                extra = _context_param(other, properties)
                if extra is not None:
                    properties[extra[0]] = extra[1]
                parameters = {**tool["parameters"], "properties": properties}
                tools.append(
                    {
                        "name": tool_name,
                        "description": f"{tool['description']} For {context['name']}: "
                        f"{_phrase(other)}.",
                        "parameters": parameters,
                        "tags": [*tool["tags"], rng.choice(TIERS)],
                    }
                )
                if origins is not None:
                    origins.append((kit_i, tool_i, context_i, other_i))
            at += 1
            lap += 1
        yield {
            "toolkit": name[:64],
            "version": "1.0.0",
            "description": f"{base['name']} for {context['name']} ({context['category']})",
            "tags": [slug(context["category"], 40)],
            "defer_loading": index > 0,
            "tools": tools,
        }
        made += count
        index += 1


def write_batches(size: int, folder: Path) -> list[Path]:
    """Manifests of ``size`` tools in directories of about ``TOOLS_PER_REGISTER`` tools."""
    batches: list[Path] = []
    current: Path | None = None
    in_batch = 0
    for i, manifest in enumerate(generate(size)):
        if current is None or in_batch >= TOOLS_PER_REGISTER:
            current = folder / f"batch{len(batches):04d}"
            current.mkdir(parents=True)
            batches.append(current)
            in_batch = 0
        (current / f"{i:06d}.json").write_text(json.dumps(manifest))
        in_batch += len(manifest["tools"])
    return batches


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


class Clock:
    """Wall and CPU time of each timed block. On a loaded machine the wall p99 is mostly the
    scheduler's (a query preempted mid-way: the same query asked again takes a twentieth of
    it); the CPU time of the asking thread is the query's own work, whatever the load."""

    def __init__(self, cpu: Any = time.thread_time) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._cpu_clock = cpu

    def __enter__(self) -> Clock:
        self._t0, self._c0 = time.perf_counter(), self._cpu_clock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu.append(self._cpu_clock() - self._c0)
        self.wall.append(time.perf_counter() - self._t0)

    def figures(self) -> dict[str, Any]:
        return {**percentiles(self.wall), "cpu": percentiles(self.cpu)}


def rss_mb() -> dict[str, float]:
    """Peak and current resident memory of this process."""
    current = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                current = int(line.split()[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rss_mb": round(current, 1), "peak_rss_mb": round(peak, 1)}


# -- child processes (each measured in a fresh interpreter) ---------------------------------


def child_serve(db: str, first: list[str], warm: list[str], then: list[str]) -> dict[str, Any]:
    """A serving process: open, status, list, first queries, warm-up, warm queries."""
    sys.path.insert(0, str(SRC))
    start = time.perf_counter()
    from toolcat import Catalog

    imported = time.perf_counter()
    catalog = Catalog(db)
    opened = time.perf_counter()
    catalog.list_summaries(limit=50)
    listed = time.perf_counter()
    catalog.status()
    statused = time.perf_counter()
    catalog.status()  # the first one imported the reindex code; this one is its reads
    status_again = time.perf_counter() - statused
    out: dict[str, Any] = {
        "import_ms": round((imported - start) * 1000, 1),
        "open_ms": round((opened - imported) * 1000, 1),
        "list_ms": round((listed - opened) * 1000, 1),
        "status_ms": round((statused - listed) * 1000, 1),
        "status_again_ms": round(status_again * 1000, 2),
    }
    clock = Clock()
    for q in first:
        with clock:
            catalog.search(q, k=10, mode="bm25")
    out["bm25_first_300"] = clock.figures()
    out["first_300_s"] = round(sum(clock.wall), 2)
    t0 = time.perf_counter()
    for q in warm:
        catalog.search(q, k=10, mode="bm25")
    first_stage = bm25_ready(catalog)
    out["warm_up_s"] = round(time.perf_counter() - t0, 2)
    out["first_stage"] = first_stage
    answers = kept_answers(catalog)
    clock = Clock()
    for q in then:
        answers.clear()  # ranked, not a kept answer
        with clock:
            catalog.search(q, k=10, mode="bm25")
    out["bm25_warm"] = clock.figures()
    out["index_backend"] = type(catalog._search.postings.index).__name__
    out.update(rss_mb())
    return out


def kept_answers(catalog: Any) -> Any:
    """The catalog's kept BM25 answers, to ``clear()`` before a query that must be ranked:
    ``SearchEngine.answers`` (a dict ``_answers`` in code before it, for ``--src``)."""
    engine = catalog._search
    return engine.answers if hasattr(engine, "answers") else getattr(engine, "_answers", {})


def bm25_ready(catalog: Any) -> str:
    """Wait for the catalog's BM25 index and its native first stage (search/native.py),
    built on threads of their own after the first queries; which first stage answers now."""
    catalog._search.postings.wait()
    wait_native = getattr(catalog._search.postings.index, "wait_native", None)  # --src: older
    if wait_native is None or wait_native(600) is None:
        return "tantivy"
    return "native"


def _tantivy_alone(db: str) -> tuple[Any, Any]:
    """tantivy over the catalog's tokenized text (every column once, whitespace tokens), as
    ``child_peers`` builds it: (searcher, schema)."""
    import sqlite3

    import tantivy

    conn = sqlite3.connect(db)
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("id", stored=True, fast=True)
    builder.add_text_field("body", stored=False, tokenizer_name="whitespace")
    index = tantivy.Index(builder.build())
    writer = index.writer(heap_size=300_000_000, num_threads=1)
    for row in conn.execute("SELECT rowid, name, hint, description, params, tags FROM tools_fts"):
        writer.add_document(tantivy.Document(id=row[0], body=" ".join(c for c in row[1:] if c)))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    conn.close()
    return index.searcher(), index.schema


def child_bm25(db: str, warm: list[str], then: list[str]) -> dict[str, Any]:
    """Warm BM25 in one serving process beside tantivy alone, query by query: the process
    serves ``warm`` queries and waits for its index, then each of ``then`` (new to it, each
    ranked: no kept answer) is asked of ``Catalog.search(q, mode="bm25")`` and, right after,
    of a plain tantivy index of the same text (the query's distinct terms, top 10)."""
    import gc

    sys.path.insert(0, str(SRC))
    import tantivy

    from toolcat import Catalog
    from toolcat.text.tokenize import tokenize

    catalog = Catalog(db)
    t0 = time.perf_counter()
    for q in warm:
        catalog.search(q, k=10, mode="bm25")
    first_stage = bm25_ready(catalog)
    gc.collect()  # warm, the heap settled out of later collections, as `toolcat serve` does
    gc.freeze()
    out: dict[str, Any] = {
        "warm_up_s": round(time.perf_counter() - t0, 2),
        "first_stage": first_stage,
    }
    searcher, schema = _tantivy_alone(db)

    def prepared(q: str) -> Any:
        should = tantivy.Occur.Should
        terms = list(dict.fromkeys(tokenize(q)))
        return tantivy.Query.boolean_query(
            [(should, tantivy.Query.term_query(schema, "body", t)) for t in terms]
        )

    peer_queries = [prepared(q) for q in then]
    collections: list[int] = []  # the generation of each garbage collection
    gc_cpu = [0.0, 0.0]  # CPU time in collections so far, the last start

    def collected(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collections.append(info["generation"])
            gc_cpu[1] = time.thread_time()
        else:
            gc_cpu[0] += time.thread_time() - gc_cpu[1]

    answers = kept_answers(catalog)
    ours, peer = Clock(), Clock()
    during: list[int] = []  # the oldest generation collected during each query, or -1
    in_gc: list[float] = []  # CPU time in collections during each query
    gc.callbacks.append(collected)
    try:
        for q, query in zip(then, peer_queries, strict=True):
            answers.clear()  # ranked, not a kept answer
            before, spent = len(collections), gc_cpu[0]
            with ours:
                catalog.search(q, k=10, mode="bm25")
            during.append(max(collections[before:], default=-1))
            in_gc.append(gc_cpu[0] - spent)
            with peer:
                searcher.search(query, 10, count=False).hits  # noqa: B018
    finally:
        gc.callbacks.remove(collected)
    out["bm25_warm"] = ours.figures()
    out["tantivy"] = peer.figures()
    out["gc_collections"] = {g: collections.count(g) for g in sorted(set(collections))}
    for clock in ("cpu", "wall"):
        a = out["bm25_warm"] if clock == "wall" else out["bm25_warm"]["cpu"]
        b = out["tantivy"] if clock == "wall" else out["tantivy"]["cpu"]
        out[f"p50_over_tantivy_{clock}"] = round(a["p50_ms"] / b["p50_ms"], 2)
        out[f"p99_over_p50_{clock}"] = round(a["p99_ms"] / a["p50_ms"], 2)
    out["gc_cpu_ms"] = round(sum(in_gc) * 1000, 1)
    out["cpu_without_gc"] = percentiles([a - b for a, b in zip(ours.cpu, in_gc, strict=True)])
    slowest = sorted(zip(ours.cpu, in_gc, during, then, strict=True), reverse=True)[:5]
    out["slowest_cpu_ms"] = [
        (round(t * 1000, 2), f"gc {g}: {c * 1000:.2f} ms", len(tokenize(q)), q[:50])
        for t, c, g, q in slowest
    ]
    out["index_backend"] = type(catalog._search.postings.index).__name__
    out.update(rss_mb())
    return out


def make_catalog(size: int, path: Path) -> dict[str, Any]:
    """The generated toolkits registered in this process (the CLI's ``register`` parses
    and validates the same manifests: several times slower; ``register`` times that)."""
    sys.path.insert(0, str(SRC))
    from toolcat import Catalog

    t0 = time.perf_counter()
    with Catalog(path) as catalog:
        saved_s = register_generated(catalog, size)
    return {
        "tools": size,
        "catalog": str(path),
        "made_s": round(time.perf_counter() - t0, 1),
        "index_saved_s": round(saved_s, 1),
        "load": load(),
    }


def register_generated(catalog: Any, size: int) -> float:
    """Register the ``size`` generated tools into ``catalog``, ~``TOOLS_PER_REGISTER`` a
    call, in one ``bulk()`` block (the BM25 index saved once, at the end); the seconds
    that save took (the toolcat package must be importable)."""
    from toolcat import Toolkit

    batch: list[Any] = []
    in_batch = 0
    with catalog.bulk():
        for manifest in generate(size):
            batch.append(Toolkit.model_validate(manifest))
            in_batch += len(manifest["tools"])
            if in_batch >= TOOLS_PER_REGISTER:
                catalog.register(batch)
                batch, in_batch = [], 0
        if batch:
            catalog.register(batch)
        saving = time.perf_counter()
    return time.perf_counter() - saving


def child_peers(db: str, qs: list[str], skip: list[str]) -> dict[str, Any]:
    """tantivy and bm25s over the catalog's own tokenized text, asked the same queries."""
    import sqlite3

    sys.path.insert(0, str(SRC))
    from toolcat.text.tokenize import tokenize

    conn = sqlite3.connect(db)
    out: dict[str, Any] = {}
    terms = [list(dict.fromkeys(tokenize(q))) for q in qs]

    def bodies() -> Iterator[tuple[int, str]]:
        for row in conn.execute(
            "SELECT rowid, name, hint, description, params, tags FROM tools_fts"
        ):
            yield row[0], " ".join(c for c in row[1:] if c)

    try:
        import tantivy
    except ImportError:
        out["tantivy"] = "not installed: pip install -e '.[dev]'"
    else:
        t0 = time.perf_counter()
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("id", stored=True, fast=True)
        builder.add_text_field("body", stored=False, tokenizer_name="whitespace")
        index = tantivy.Index(builder.build())
        writer = index.writer(heap_size=300_000_000, num_threads=1)
        for rowid, body in bodies():
            writer.add_document(tantivy.Document(id=rowid, body=body))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        searcher = index.searcher()
        out["tantivy_build_s"] = round(time.perf_counter() - t0, 1)
        prepared = [
            tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Should, tantivy.Query.term_query(index.schema, "body", t))
                    for t in ts
                ]
            )
            for ts in terms
            if ts
        ]
        clock = Clock()
        for query in prepared:
            with clock:
                searcher.search(query, 10, count=False).hits  # noqa: B018
        out["tantivy"] = clock.figures()
        del searcher, index, writer
    out.update({f"after_tantivy_{k}": v for k, v in rss_mb().items()})
    try:
        if "bm25s" in skip:  # at 1M tools it needs more memory than the machine may have
            raise ImportError
        import bm25s
    except ImportError:
        out["bm25s"] = "skipped" if "bm25s" in skip else "not installed: pip install -e '.[dev]'"
    else:
        t0 = time.perf_counter()
        retriever = bm25s.BM25()
        retriever.index([body.split() for _, body in bodies()], show_progress=False)
        out["bm25s_build_s"] = round(time.perf_counter() - t0, 1)
        clock = Clock(time.process_time)  # bm25s may score on threads of its own
        for ts in terms:
            known = [t for t in ts if t in retriever.vocab_dict]
            if known:
                with clock:
                    retriever.retrieve([known], k=10, show_progress=False, n_threads=1)
        out["bm25s"] = clock.figures()
    out.update({f"after_bm25s_{k}": v for k, v in rss_mb().items()})
    return out


def child_vectors(size: int, dims: int = 384, runs: int = 50) -> dict[str, Any]:
    """Exact top-10 by dot product over ``size`` seeded random unit vectors, int8 and fp16."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    out: dict[str, Any] = {}
    matrix = np.empty((size, dims), dtype=np.float16)
    for start in range(0, size, 100_000):  # float32 only a slice at a time
        part = rng.standard_normal((min(100_000, size - start), dims), dtype=np.float32)
        part /= np.linalg.norm(part, axis=1, keepdims=True)
        matrix[start : start + len(part)] = part
    queries = rng.standard_normal((runs, dims), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    int8 = np.empty((size, dims), dtype=np.int8)  # a float32 slice at a time
    for start in range(0, size, 100_000):
        part = matrix[start : start + 100_000].astype(np.float32)
        int8[start : start + len(part)] = np.clip(np.rint(part * 127 / 0.35), -127, 127)
    for name, stored, cast in (
        ("fp16", matrix, lambda q: q.astype(np.float16)),
        ("int8", int8, lambda q: np.clip(np.rint(q * 127 / 0.35), -127, 127).astype(np.int8)),
    ):
        clock = Clock(time.process_time)  # BLAS may use more than this thread
        for q in queries:
            with clock:
                scores = _scores(stored, cast(q))
                top = np.argpartition(-scores, 10)[:10]
                top[np.argsort(-scores[top])]
        out[f"{name}_scan"] = clock.figures()
        out[f"{name}_matrix_mb"] = round(stored.nbytes / 2**20, 1)
    out.update(rss_mb())
    return out


def _scores(stored: Any, query: Any, chunk: int = 65_536) -> Any:
    """Dot products accumulated in float32, a chunk of rows at a time (BLAS sgemv on a
    converted chunk: numpy has no int8 or fp16 GEMV of its own worth using)."""
    import numpy as np

    q = query.astype(np.float32)
    scores = np.empty(len(stored), dtype=np.float32)
    for start in range(0, len(stored), chunk):
        scores[start : start + chunk] = stored[start : start + chunk].astype(np.float32) @ q
    return scores


def child_store_vectors(db: str, vectors: str) -> dict[str, Any]:
    """Write the synthesised vectors (scripts/research/ann_vectors.py: one row per generated
    tool, in ``generate``'s order, which is the catalog's tool id order) into the catalog's
    ``embeddings`` table under the shipped retriever's model id, as reindex would store them
    (``writer.store_vectors``, batch by batch, with the model, width and producer recorded),
    then run ``Catalog.reindex()``: nothing is stale, so it only loads the vectors and saves
    their shortlist beside the catalog (timed: what reindex costs at this size on top of
    embedding). Skipped when every active tool has a vector."""
    import numpy as np

    sys.path.insert(0, str(SRC))
    from toolcat import Catalog
    from toolcat.search import ann
    from toolcat.search.embeddings import RETRIEVER, embedder, to_blob
    from toolcat.store import counts, writer

    matrix = np.load(vectors, mmap_mode="r")
    out: dict[str, Any] = {}
    build = ann.build

    def timed_build(*args: Any, **kwargs: Any) -> ann.Shortlist:
        t0, c0 = time.perf_counter(), time.process_time()
        made = build(*args, **kwargs)
        out["shortlist_build_s"] = round(time.perf_counter() - t0, 1)
        out["shortlist_build_cpu_s"] = round(time.process_time() - c0, 1)
        return made

    ann.build = timed_build
    with Catalog(db) as catalog:
        conn = catalog._conn
        active = counts.active_tools(conn)
        if counts.vectors(conn, RETRIEVER) < active:
            t0 = time.perf_counter()
            hashes = [h for (h,) in conn.execute("SELECT content_hash FROM tools ORDER BY id")]
            if len(hashes) > len(matrix):
                raise SystemExit(f"{vectors} has {len(matrix)} rows for {len(hashes)} tools")
            for at in range(0, len(hashes), 10_000):
                rows = matrix[at : at + 10_000]
                writer.store_vectors(
                    conn,
                    RETRIEVER,
                    [(h, to_blob(v)) for h, v in zip(hashes[at : at + 10_000], rows, strict=True)],
                )
            writer.set_meta(
                conn,
                {
                    "embedding_model": RETRIEVER,
                    "embedding_dim": int(matrix.shape[1]),
                    "embedding_producer": f"{RETRIEVER} {embedder(RETRIEVER).producer()}",
                },
            )
            out["stored_s"] = round(time.perf_counter() - t0, 1)
        t0, c0 = time.perf_counter(), time.process_time()
        report = catalog.reindex()
        out["reindex_s"] = round(time.perf_counter() - t0, 1)
        out["reindex_cpu_s"] = round(time.process_time() - c0, 1)
        out["reindex_embedded"] = report.embedded
    out.update(rss_mb())
    return out


def child_hybrid(
    db: str, warm: list[str], bm25: list[str], hybrid: list[str], tantivy: bool
) -> dict[str, Any]:
    """One serving process with vectors: open, then a first hybrid query (it loads the
    BM25 index, the vectors and the shortlist saved beside the catalog: timed until all are
    ready), a warm-up with ``warm`` in both modes, then ``bm25`` (300 new queries) and
    ``hybrid`` (300 others, the shipped retriever encoding each: process CPU, as the
    encoder runs on threads of its own) with no kept answers; the process's RSS (current and
    peak); then the embedding side alone on the hybrid queries' vectors at hybrid's depth,
    the shortlist against the store's exact scan, alternated (thread CPU, recall@10 of the
    first against the second); then tantivy alone over the same text, built in this process
    after the RSS was taken, on the BM25 queries."""
    sys.path.insert(0, str(SRC))
    from toolcat import Catalog
    from toolcat.search import ann
    from toolcat.search.embeddings import embedder
    from toolcat.search.engine import HYBRID_DEPTH

    out: dict[str, Any] = {"ann_installed": ann.installed()}
    t0 = time.perf_counter()
    catalog = Catalog(db)
    catalog.search(warm[0], k=10, mode="hybrid")
    vectors = catalog._search.vectors
    first = time.perf_counter()
    catalog._search.postings.wait()
    # --src may name an older toolcat: its float32 matrix and HNSW graph (up to 100k rows)
    index = "shortlist" if hasattr(vectors, "shortlist") else "graph"
    getattr(vectors, f"wait_{index}")()
    out["first_hybrid_s"] = round(first - t0, 2)
    out["ready_s"] = round(time.perf_counter() - t0, 2)
    out["store"] = str(vectors.matrix.dtype) if vectors.matrix is not None else None
    out[index] = getattr(vectors, index) is not None or getattr(vectors, f"{index}_error")
    out["vector_rows"] = vectors.tool_rows
    for q in warm:
        catalog.search(q, k=10, mode="bm25")
        catalog.search(q, k=10, mode="hybrid")
    answers = kept_answers(catalog)
    for mode, asked in (("bm25", bm25), ("hybrid", hybrid)):
        clock = Clock(time.thread_time if mode == "bm25" else time.process_time)
        for q in asked:
            answers.clear()  # ranked, not a kept answer
            with clock:
                catalog.search(q, k=10, mode=mode)
        out[mode] = clock.figures()
    out.update(rss_mb())
    model = catalog._search.model_id(catalog._conn)
    query_vectors = embedder(model).encode_queries(hybrid)
    approximate = getattr(vectors, index)
    fast, exact = Clock(), Clock()
    hits = wanted = 0
    for v in query_vectors:
        with fast:
            found = vectors.search(v, HYBRID_DEPTH)
        setattr(vectors, index, None)
        with exact:
            truth = vectors.search(v, HYBRID_DEPTH)
        setattr(vectors, index, approximate)
        hits += len({i for i, _ in found[:10]} & {i for i, _ in truth[:10]})
        wanted += min(10, len(truth))
    out["embedding_side"] = {
        index: fast.figures(),
        "exact_scan": exact.figures(),
        "recall_at_10": round(hits / max(1, wanted), 4),
    }
    if tantivy:
        import tantivy as tv

        from toolcat.text.tokenize import tokenize

        searcher, schema = _tantivy_alone(db)
        peer = Clock()
        for q in bm25:
            terms = list(dict.fromkeys(tokenize(q)))
            query = tv.Query.boolean_query(
                [(tv.Occur.Should, tv.Query.term_query(schema, "body", t)) for t in terms]
            )
            with peer:
                searcher.search(query, 10, count=False).hits  # noqa: B018
        out["tantivy"] = peer.figures()
    catalog.close()
    return out


def child_save_index(db: str) -> dict[str, Any]:
    """``lexical_index.save_current`` alone on a catalog registered with ``--no-index``."""
    from toolcat.search import bm25, lexical_file, lexical_index

    t0, c0 = time.perf_counter(), time.process_time()
    built = lexical_index.save_current(db, bm25.DEFAULT_WEIGHTS, lexical_file.SAVED_FROM)
    return {
        "save_s": round(time.perf_counter() - t0, 2),
        "save_cpu_s": round(time.process_time() - c0, 2),
        "saved": built is not None,
        "saved_mb": round(
            sum(f.stat().st_size for f in lexical_file.folder(db).rglob("*") if f.is_file()) / 2**20
        ),
    }


def child_mcp(
    db: str, size: int, qs: list[str], warm: list[str], clients: int, requests: int, rounds: int
) -> dict[str, Any]:
    """The serving face: ``toolcat serve --http`` on the catalog beside the bare MCP SDK
    server (scripts/bare_mcp_server.py), driven from this process (``load_mcp.measure``):
    the first and kept ``tools/list``, ``search_tools`` of ``qs`` beside ``Catalog.search``
    here (server CPU and wall), then ``clients`` concurrent clients, ``rounds`` rounds
    alternating the servers, for a trivial call and ``search_tools`` (cycling through ``qs``,
    so repeats get the catalog's kept answers; ``search_tools new``: a query never asked
    before each time); ``targets`` holds the issue's rows as measured (capacity: the bare
    server's CPU per trivial call over toolcat's per request)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import load_mcp

    asked = set(qs) | set(warm)
    needed = rounds * clients * (requests + 1)
    fresh = [
        q for q in queries(random.Random(SEED + size + 1), needed + len(asked)) if q not in asked
    ]
    report = load_mcp.measure(
        Path(db),
        qs,
        warm,
        clients=clients,
        requests=requests,
        rounds=rounds,
        kinds=(load_mcp.TRIVIAL, "search_tools", load_mcp.NEW_SEARCH),
        fresh=fresh[:needed],
        settle=2 + size / 40_000,  # 27 s at 1M tools: the server loads its BM25 index
        src=SRC,
    )
    listed, latency, rows = report["tools/list"], report["latency"], report["throughput"]
    trivial, search = rows[f"toolcat {load_mcp.TRIVIAL}"], rows["toolcat search_tools"]
    new = rows[f"toolcat {load_mcp.NEW_SEARCH}"]
    report["targets"] = {
        "tools_list_first_ms": listed["toolcat"]["first_ms"],
        "tools_list_first_cpu_ms": listed["toolcat"]["first_cpu_ms"],
        "tools_list_kept_p50_ms": listed["toolcat"]["kept"]["p50_ms"],
        "tools_list_kept_cpu_p50_ms": listed["toolcat"]["kept"]["cpu_p50_ms"],
        "tools_list_kept_cpu_p50_ms_bare": listed["bare"]["kept"]["cpu_p50_ms"],
        "search_tools_p50_ms": latency["toolcat search_tools"]["p50_ms"],
        "python_search_p50_ms": latency["python search"]["p50_ms"],
        **report["search_tools_vs_python"],
        "trivial_capacity_vs_bare": trivial["capacity_vs_bare_call"],
        "trivial_rps_vs_bare": trivial["rps_vs_bare_call"],
        "search_tools_capacity_vs_bare": search["capacity_vs_bare_call"],
        "search_tools_rps_vs_bare": search["rps_vs_bare_call"],
        "search_tools_new_capacity_vs_bare": new["capacity_vs_bare_call"],
        "search_tools_new_rps_vs_bare": new["rps_vs_bare_call"],
    }
    return report


CHILDREN = {
    "save_index": child_save_index,
    "serve": child_serve,
    "peers": child_peers,
    "vectors": child_vectors,
    "bm25": child_bm25,
    "store_vectors": child_store_vectors,
    "hybrid": child_hybrid,
    "mcp": child_mcp,
}
MCP_CLIENTS, MCP_REQUESTS, MCP_ROUNDS, MCP_QUERIES = 16, 20, 5, 100


def mcp_phase(db: Path, size: int, then: list[str], warm: list[str]) -> dict[str, Any]:
    """``child_mcp`` in a fresh process: ``MCP_QUERIES`` of the warm BM25 queries, after 50
    of the warm-up ones."""
    return in_child(
        "mcp",
        db=str(db),
        size=size,
        qs=then[:MCP_QUERIES],
        warm=warm[:50],
        clients=MCP_CLIENTS,
        requests=MCP_REQUESTS,
        rounds=MCP_ROUNDS,
    )


def in_child(kind: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``CHILDREN[kind](**kwargs)`` in a fresh interpreter; its JSON result."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(kwargs, f)
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--child", kind, f.name],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(f.name)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load"] = load()
    return result


def cold_list(db: Path, runs: int = 7) -> dict[str, Any]:
    """``toolcat list --json`` in fresh processes beside ``python -c pass`` (interleaved)."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("BENCH_SCALE_SRC", str(SRC))}
    commands = {
        "python_c_pass": [sys.executable, "-c", "pass"],
        "list_json": [sys.executable, "-m", "toolcat", "--db", str(db), "list", "--json"],
        "status_json": [sys.executable, "-m", "toolcat", "--db", str(db), "status", "--json"],
    }
    samples: dict[str, list[float]] = {n: [] for n in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
            samples[name].append(time.perf_counter() - t0)
    return {
        **{f"{n}_p50_ms": round(statistics.median(s) * 1000, 1) for n, s in samples.items()},
        "first_list_json_ms": round(samples["list_json"][0] * 1000, 1),
        "load": load(),
    }


def register(
    db: Path, batches: list[Path], one_call: bool = False, index_apart: bool = False
) -> dict[str, Any]:
    """``toolcat register DIR`` per directory of ~2,500 tools (or, ``one_call``, one
    ``toolcat register DIR...`` for all of them); wall and CPU time (the CLI's and its
    workers'). Every call but the last passes ``--no-index``: the last one saves the BM25
    index (a full build). ``index_apart``: the last one too, and the save is timed alone
    (``save_s``, ``save_cpu_s``) in a child process."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("BENCH_SCALE_SRC", str(SRC))}
    calls = [batches] if one_call else [[batch] for batch in batches]
    each = []
    cpu = 0.0
    for i, dirs in enumerate(calls):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        no_index = ["--no-index"] if index_apart or i < len(calls) - 1 else []
        command = [sys.executable, "-m", "toolcat", "--db", str(db), "register", *no_index]
        subprocess.run(
            [*command, *map(str, dirs)],
            check=True,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        each.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu += after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if len(each) % 40 == 0:
            print(f"registered {len(each)} of {len(calls)}: {sum(each):.0f} s", file=sys.stderr)
    # the largest of the CLI processes and their workers (Linux: KiB; every child of this
    # run so far, so only when registering is the first thing it does)
    peak_rss_mb = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    saved = in_child("save_index", db=str(db)) if index_apart else {}
    return {
        **saved,
        "register_s": round(sum(each), 1),
        "register_cpu_s": round(cpu, 1),
        "register_calls": len(each),
        "first_call_s": round(each[0], 2),
        "last_call_s": round(each[-1], 2),
        "db_mb": round(db.stat().st_size / 2**20),
        "register_peak_rss_mb": peak_rss_mb,
        "load": load(),
    }


def bench_size(
    size: int,
    workdir: Path,
    warm: int,
    skip: set[str],
    register_only: str | None = None,
    index_apart: bool = False,
) -> dict[str, Any]:
    rng = random.Random(SEED + size)
    qs = queries(rng, 600 + warm)
    first, then, warm_qs = qs[:300], qs[300:600], qs[600:]
    db = workdir / f"scale-{size}.db"
    result: dict[str, Any] = {"tools": size}
    manifests = workdir / f"manifests-{size}"
    t0 = time.perf_counter()
    batches = write_batches(size, manifests)
    result["generate_s"] = round(time.perf_counter() - t0, 1)
    one_call = register_only == "one-call"
    phase(result, "register", register(db, batches, one_call, index_apart))
    shutil.rmtree(manifests)
    if register_only:
        return result
    phase(result, "cold_cli", cold_list(db))
    serve_phases(result, db, first, warm_qs, then)
    if "peers" not in skip:
        phase(result, "peers", in_child("peers", db=str(db), qs=then, skip=sorted(skip)))
    if "vectors" not in skip:
        phase(result, "vectors", in_child("vectors", size=size))
    if "mcp" not in skip:
        phase(result, "mcp", mcp_phase(db, size, then, warm_qs))
    serve, peers = result["serve"], result.get("peers", {})
    for peer in ("tantivy", "bm25s"):
        if isinstance(peers.get(peer), dict) and "bm25_warm" in serve:
            for clock in ("wall", "cpu"):
                ours = serve["bm25_warm"] if clock == "wall" else serve["bm25_warm"]["cpu"]
                theirs = peers[peer] if clock == "wall" else peers[peer]["cpu"]
                result[f"warm_p50_over_{peer}_{clock}"] = round(
                    ours["p50_ms"] / theirs["p50_ms"], 2
                )
    return result


def serve_phases(
    result: dict[str, Any], db: Path, first: list[str], warm: list[str], then: list[str]
) -> None:
    """The serving process, then another one opening the catalog at the same revision
    (``serve_reopened``: the BM25 index the first one saved beside the catalog is loaded,
    not rebuilt)."""
    for name in ("serve", "serve_reopened"):
        phase(result, name, in_child("serve", db=str(db), first=first, warm=warm, then=then))


def phase(result: dict[str, Any], name: str, figures: dict[str, Any]) -> None:
    """Keep a phase's figures, and print them at once (stderr): a long run that is cut
    short still leaves what it measured."""
    result[name] = figures
    print(json.dumps({"tools": result["tools"], name: figures}), file=sys.stderr, flush=True)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        kwargs = json.loads(Path(sys.argv[3]).read_text())
        sys.path.insert(0, str(SRC))
        if os.environ.get("BENCH_SCALE_FIRST_STAGE") == "tantivy":
            with contextlib.suppress(ImportError):  # --src may name a toolcat without it
                from toolcat.search import native

                native.ENABLED = False
        print(json.dumps(CHILDREN[sys.argv[2]](**kwargs)), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--warm", type=int, default=300, help="Queries served before warm ones.")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["peers", "bm25s", "vectors", "mcp"]
    )
    parser.add_argument("--workdir", type=Path, help="Keep catalogs here (default: a temp dir).")
    parser.add_argument(
        "--first-stage",
        choices=["native", "tantivy"],
        default="native",
        help="BM25's first stage in the serving processes: the native one where built "
        "(search/native.py), or tantivy's alone (the code before it).",
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON document at the end.")
    parser.add_argument("--src", type=Path, help="Measure the toolcat package under this folder.")
    parser.add_argument(
        "--register-only",
        nargs="?",
        const="each-call",
        choices=["each-call", "one-call"],
        help="Only generate and register (a CLI call per ~2,500 tools, or one call for all).",
    )
    parser.add_argument(
        "--index-apart",
        action="store_true",
        help="Register with --no-index, then time saving the BM25 index alone (save_s).",
    )
    parser.add_argument(
        "--catalog",
        type=Path,
        help="Only the serving processes and peers, on this catalog made by an earlier run "
        "(its size is the first --sizes).",
    )
    parser.add_argument(
        "--make-catalog",
        type=Path,
        metavar="DB",
        help="Register the first --sizes' generated toolkits into DB in process, and stop "
        "(nothing when DB exists).",
    )
    parser.add_argument(
        "--bm25",
        action="store_true",
        help="With --catalog: only warm BM25 beside tantivy alone, in one process.",
    )
    parser.add_argument(
        "--hybrid",
        action="store_true",
        help="With --catalog: one serving process with vectors (BM25 and hybrid p50/p99, "
        "RSS, the shortlist beside the exact scan, tantivy).",
    )
    parser.add_argument(
        "--vectors",
        type=Path,
        metavar="NPY",
        help="With --hybrid: first store these vectors (scripts/research/ann_vectors.py) "
        "when the catalog has none, and save their shortlist through reindex.",
    )
    parser.add_argument(
        "--mcp",
        action="store_true",
        help="With --catalog: only the MCP face beside a bare MCP SDK server (tools/list, "
        "search_tools against Catalog.search, 16 concurrent clients).",
    )
    args = parser.parse_args()
    if (args.bm25 or args.hybrid or args.mcp) and not args.catalog:
        parser.error(
            "--bm25, --hybrid and --mcp need --catalog DB (make one with --make-catalog DB)"
        )
    if args.src:  # the children read it
        os.environ["BENCH_SCALE_SRC"] = str(args.src.resolve())
    os.environ["BENCH_SCALE_FIRST_STAGE"] = args.first_stage
    if not BENCH.is_dir():
        sys.exit(f"bench_scale needs the public benchmark tools in {BENCH}")
    results = []
    if args.make_catalog:
        if not args.make_catalog.exists():
            print(json.dumps(make_catalog(args.sizes[0], args.make_catalog)), flush=True)
        return
    if args.catalog:
        size = args.sizes[0]
        qs = queries(random.Random(SEED + size), 600 + args.warm)
        result: dict[str, Any] = {"tools": size, "catalog": str(args.catalog)}
        if args.bm25:
            figures = in_child("bm25", db=str(args.catalog), warm=qs[600:], then=qs[300:600])
            print(json.dumps({**result, "bm25": figures}), flush=True)
            return
        if args.mcp:
            phase(result, "mcp", mcp_phase(args.catalog, size, qs[300:600], qs[600:]))
            print(json.dumps(result), flush=True)
            return
        if args.hybrid:
            if args.vectors:
                figures = in_child("store_vectors", db=str(args.catalog), vectors=str(args.vectors))
                phase(result, "store_vectors", figures)
            figures = in_child(
                "hybrid",
                db=str(args.catalog),
                warm=qs[600:],
                bm25=qs[300:600],
                hybrid=qs[:300],
                tantivy="peers" not in args.skip,
            )
            phase(result, "hybrid", figures)
            print(json.dumps(result), flush=True)
            return
        serve_phases(result, args.catalog, qs[:300], qs[600:], qs[300:600])
        if "peers" not in args.skip:
            phase(
                result,
                "peers",
                in_child("peers", db=str(args.catalog), qs=qs[300:600], skip=sorted(args.skip)),
            )
        print(json.dumps(result), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for size in args.sizes:
            result = bench_size(
                size, workdir, args.warm, set(args.skip), args.register_only, args.index_apart
            )
            results.append(result)
            if not args.json:
                print(json.dumps(result), flush=True)
    if args.json:
        print(json.dumps({"seed": SEED, "results": results}, indent=2))


if __name__ == "__main__":
    main()
