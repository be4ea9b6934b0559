"""Benchmark embedding and hybrid search, and reindexing.

- Query latency in a serving process (a fresh process that opens the catalog and answers
  queries, as the MCP server does: ONNX query encoder, no torch), warm (matrix, postings
  index and ONNX session loaded; query cache cleared), for ``embedding``, ``hybrid`` and
  ``bm25`` at 10k and 100k tools, hybrid for 8-word and repeated queries (vectors from the
  query cache), hybrid and bm25 filtered by a tag half the tools have and hybrid within one
  toolkit (as a scoped MCP caller asks), hybrid throughput with 1, 2 and 4 concurrent
  callers, and that process's peak RSS; once with fp32 queries (``TOOLCAT_ONNX_INT8=0``)
  and once with the int8 query graph, in the same run, each beside ``--baseline-src``'s
  serving process when given.
- Cold one-shot ``toolcat search Q`` (hybrid) beside cold ``toolcat list --json`` on the same
  catalog, and ``python -c pass``.
- In-process latency (torch loaded, as right after a reindex) for ``embedding`` and
  ``hybrid``, fp32 and int8 queries; hybrid with the query encoder's threads against one
  thread, alternated query by query; query encoding alone with torch, the fp32 graph and
  the int8 graph, interleaved. The tools are the seeded workload of bench_catalog.py; every distinct
  text is embedded for real once, and numbered variants of a tool reuse its vector (the
  matrix size is what query time depends on, and embedding 100k texts takes most of an hour
  on 2 cores).
- Reindex throughput on the same texts and batch size: encoding alone with
  sentence-transformers (catalog order, shortest first) and with the ONNX export, and whole
  ``reindex`` runs in fresh processes with either encoder.
- A no-change reindex of the 10k catalog.

    python scripts/bench_search.py [--sizes 10000 100000] [--reindex-tools 2000]
        [--cold-sizes 1000 10000] [--cold-only] [--cold-runs 7] [--baseline-src ../main/src]
        [--serving-rounds 3]
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_catalog import SEED, make_toolkits, percentiles, tool_pool  # noqa: E402
from toolcat import Catalog, Tool, Toolkit  # noqa: E402
from toolcat.search.embeddings import MINILM, embedder, embedding_text, to_blob  # noqa: E402

# The model the catalogs are embedded with (--model): the base MiniLM by default, which the
# code before the packaged retriever (--baseline-src) can load too.
MODEL = MINILM
from toolcat.store import writer  # noqa: E402


def base_text(tool: dict[str, Any]) -> str:
    """The embedding text of a workload tool without its numbered-variant suffixes."""
    base = dict(tool)
    base["name"] = tool["name"].rsplit("_", 1)[0]
    base["description"] = tool["description"].split(" (variant ")[0]
    return embedding_text(Tool.model_validate(base))


def build(db: Path, size: int, pool: list[dict[str, Any]], cache: dict[str, bytes]) -> Catalog:
    raw = make_toolkits(pool, size)
    catalog = Catalog(db, embedding_model=MODEL)
    catalog.register(*[Toolkit.model_validate(t) for t in raw])
    encoder = embedder(MODEL)
    texts = {base_text(t) for kit in raw for t in kit["tools"]} - cache.keys()
    ordered = sorted(texts)
    for start in range(0, len(ordered), 256):
        chunk = ordered[start : start + 256]
        for text, vector in zip(chunk, encoder.encode(chunk, batch_size=64), strict=True):
            cache[text] = to_blob(vector)
    by_name = {
        (kit["toolkit"], t["name"]): cache[base_text(t)] for kit in raw for t in kit["tools"]
    }
    conn = catalog._conn
    rows = conn.execute(
        "SELECT t.content_hash, t.toolkit, t.name FROM tools t JOIN toolkits k "
        "ON k.id = t.toolkit_id WHERE k.active = 1"
    ).fetchall()
    vectors = [(h, by_name[(kit, name)]) for h, kit, name in rows]
    for start in range(0, len(vectors), 5000):
        writer.store_vectors(conn, MODEL, vectors[start : start + 5000])
    # What made the vectors (as reindex records it), so that a reindex keeps them.
    made = f"{MODEL} {encoder.producer()}"
    writer.set_meta(
        conn, {"embedding_model": MODEL, "embedding_dim": 384, "embedding_producer": made}
    )
    return catalog


def timed(
    catalog: Catalog, queries: list[str], mode: str, cached: bool = False
) -> dict[str, float]:
    """Search latency; with ``cached`` the query vectors are already computed, which leaves
    the catalog's own work (matrix product, filters, fusion, fetching hits)."""
    encoder = embedder(MODEL)
    catalog.search(queries[0], mode=mode)  # load the matrix
    catalog.search(queries[1], mode=mode)
    catalog._search.postings.wait()  # the in-memory BM25 index builds in the background
    encoder._queries.clear()
    if cached:
        for query in queries:
            encoder.encode_query(query)
    samples = []
    for query in queries:
        start = time.perf_counter()
        catalog.search(query, mode=mode, k=10)
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


def query_precision(int8: bool) -> None:
    """Make this process's query encoder the int8 graph or the fp32 one (the query cache is
    cleared)."""
    import os

    os.environ["TOOLCAT_ONNX_INT8"] = "1" if int8 else "0"
    encoder = embedder(MODEL)
    with encoder._lock:
        encoder._onnx_checked = False
        encoder._queries.clear()


def encoder_threads(catalog: Catalog, queries: list[str]) -> dict[str, Any]:
    """Whole hybrid searches (query cache cleared) with the query encoder this process
    would use (``query_threads()`` threads, spinning off) against one thread as before
    (spinning, one run at a time), alternated query by query; fp32 and int8."""
    import os

    from toolcat.search import embeddings
    from toolcat.search.encoders import export as exports
    from toolcat.search.encoders import onnx as onnx_encoder

    encoder = embedder(MODEL)
    folder = exports.export_dir(MODEL, embeddings.model_location(MODEL))
    out: dict[str, Any] = {"threads": embeddings.query_threads()}
    for int8 in (False, True):
        query_precision(int8)
        ways = {
            "default": encoder.query_encoder(),
            "one_thread": onnx_encoder.OnnxEncoder(folder, threads=1, int8=int8),
        }
        for label, texts in (
            ("whole", queries),
            ("8_words", [" ".join(q.split()[:8]) for q in queries]),
        ):
            samples: dict[str, list[float]] = {name: [] for name in ways}
            for query in texts:
                for name, fast in ways.items():
                    with encoder._lock:
                        encoder._onnx, encoder._onnx_checked = fast, True
                        encoder._queries.clear()
                    start = time.perf_counter()
                    catalog.search(query, mode="hybrid", k=10)
                    samples[name].append(time.perf_counter() - start)
            found: dict[str, Any] = {name: percentiles(s) for name, s in samples.items()}
            found["default_over_one_thread"] = round(
                found["default"]["p50_ms"] / found["one_thread"]["p50_ms"], 3
            )
            out[f"{'int8' if int8 else 'fp32'}_{label}"] = found
    out["load_1min"] = round(os.getloadavg()[0], 2)
    query_precision(False)
    return out


def encode_only(queries: list[str]) -> dict[str, Any]:
    """One query at a time: sentence-transformers (torch), the ONNX export's fp32 graph and
    its int8 graph (queries interleaved, so load hits them alike)."""
    encoder = embedder(MODEL)
    query_precision(False)
    fp32 = encoder.query_encoder()
    query_precision(True)
    int8 = encoder.query_encoder()
    ways = {"torch": encoder.model_encode}
    for name, fast in (("onnx_fp32", fp32), ("onnx_int8", int8)):
        if fast is None:
            return {"onnx": encoder.note}
        ways[name] = fast.encode
    out: dict[str, Any] = {"graphs": [fp32.graph, int8.graph]}  # type: ignore[union-attr]
    for label, texts in (
        ("whole", queries),
        ("8_words", [" ".join(q.split()[:8]) for q in queries]),
    ):
        samples: dict[str, list[float]] = {name: [] for name in ways}
        for query in texts:
            for name, encode in ways.items():
                start = time.perf_counter()
                encode([query])
                samples[name].append(time.perf_counter() - start)
        found = {name: percentiles(times) for name, times in samples.items()}
        found["int8_over_fp32"] = round(
            found["onnx_int8"]["p50_ms"] / found["onnx_fp32"]["p50_ms"], 3
        )
        out[label] = found
    return out


SERVE = """
import json, os, statistics, sys, threading, time
from toolcat import Catalog
from toolcat.search.embeddings import embedder
db, queries = sys.argv[1], json.loads(sys.argv[2])
catalog = Catalog(db)
for q in queries[:20]:
    catalog.search(q, mode="hybrid")
    catalog.search(q, mode="bm25")
catalog._search.postings.wait()  # the in-memory BM25 index builds in the background
encoder = embedder("all-MiniLM-L6-v2")
out = {"load_1min": round(os.getloadavg()[0], 2), "graph": encoder.query_encoder().graph}

def p50(samples):
    return round(statistics.median(samples) * 1000, 3)

def loop(qs, mode, clear=True, **filters):
    if clear:
        encoder._queries.clear()
    samples = []
    for q in qs:
        start = time.perf_counter()
        catalog.search(q, mode=mode, k=10, **filters)
        samples.append(time.perf_counter() - start)
    samples.sort()
    return {"p50_ms": p50(samples), "p99_ms": round(samples[int(len(samples) * 0.99)] * 1000, 3)}

for mode in ("hybrid", "embedding", "bm25"):
    out[mode] = loop(queries, mode)
    if mode == "hybrid":  # the same queries again: their vectors from the query cache
        out["hybrid_repeated"] = loop(queries, "hybrid", clear=False)
out["hybrid_8_words"] = loop([" ".join(q.split()[:8]) for q in queries], "hybrid")
# As a scoped caller asks: a tag half the tools have, one toolkit of 50 tools.
out["hybrid_tag_filter"] = loop(queries, "hybrid", tags=["odd"])
out["hybrid_one_toolkit"] = loop(queries, "hybrid", toolkit="kit00001")
out["bm25_tag_filter"] = loop(queries, "bm25", tags=["odd"])
# Read before the readers below (each holds its own index and matrix). VmHWM, not
# ru_maxrss: a child's ru_maxrss keeps the parent's RSS from before exec (this script's,
# with torch and the catalogs loaded: it read 1.3-1.4 GB for a 0.3 GB process).
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
out["rss_mb"] = round(int(status["VmRSS"].split()[0]) / 1024, 1)
out["peak_rss_mb"] = round(int(status["VmHWM"].split()[0]) / 1024, 1)
# Concurrent callers, each on its own Catalog as the MCP server's readers are: throughput.
readers = [Catalog(db) for _ in range(4)]
for reader in readers:
    reader.search(queries[0], mode="hybrid")
    reader.search(queries[1], mode="hybrid")
    reader._search.postings.wait()
for callers in (1, 2, 4):
    encoder._queries.clear()
    latencies = []
    def work(reader, qs):
        for q in qs:
            start = time.perf_counter()
            reader.search(q, mode="hybrid", k=10)
            latencies.append(time.perf_counter() - start)
    threads = [threading.Thread(target=work, args=(readers[i], queries[i::callers]))
               for i in range(callers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out[f"hybrid_{callers}_callers"] = {
        "queries_per_s": round(len(queries) / (time.perf_counter() - start), 1),
        "p50_ms": p50(latencies),
    }
out["torch_loaded"] = "torch" in sys.modules
out["warnings"] = catalog.search(queries[0], mode="hybrid").warnings
print(json.dumps(out))
"""


def serving(
    db: Path, queries: list[str], int8: bool = True, src: Path | None = None
) -> dict[str, Any]:
    """Warm latencies, throughput with concurrent callers and peak RSS of a fresh serving
    process (no torch); ``src``: another checkout's ``src`` to run instead of this one."""
    import os

    env = {**os.environ, "TOOLCAT_ONNX_INT8": "1" if int8 else "0"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(db), json.dumps(queries)],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode:
        sys.exit(f"the serving process ({src or 'this checkout'}) failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def median_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Serving results of several rounds: each timing the median of the rounds' (and the
    rounds' own figures and loads beside)."""
    out = dict(runs[0])
    for name, value in runs[0].items():
        if isinstance(value, dict):
            out[name] = {
                key: round(statistics.median(run[name][key] for run in runs), 3) for key in value
            }
    out["load_1min"] = [run["load_1min"] for run in runs]
    out["rounds"] = {
        name: [run[name].get("p50_ms", run[name].get("queries_per_s")) for run in runs]
        for name, value in runs[0].items()
        if isinstance(value, dict)
    }
    return out


def cold(db: Path, query: str, runs: int = 7, baseline: Path | None = None) -> dict[str, Any]:
    """Cold one-shot commands, interleaved so load hits them alike; ratios to list.

    toolcat's bytecode is compiled first, as `pip install` does (with PYTHONDONTWRITEBYTECODE
    set, an editable checkout recompiles every module at every start); see bench_catalog.py.
    ``baseline``: another checkout's ``src`` (say, main's), whose list, BM25 and hybrid
    searches run in the same rounds, so a change is timed beside the code before it.
    """
    import compileall
    import os

    sources = {"": ROOT / "src", **({"baseline_": baseline} if baseline else {})}
    commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "python_c_pass": ([sys.executable, "-c", "pass"], None)
    }
    for prefix, src in sources.items():
        compileall.compile_dir(src / "toolcat", quiet=1)
        env = {**os.environ, "PYTHONPATH": str(src)}
        toolcat = [sys.executable, "-m", "toolcat", "--db", str(db)]
        commands[f"{prefix}list_json"] = ([*toolcat, "list", "--json"], env)
        commands[f"{prefix}search_bm25"] = ([*toolcat, "search", query, "--mode", "bm25"], env)
        commands[f"{prefix}search_hybrid"] = ([*toolcat, "search", query], env)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (cmd, env) in commands.items():
            start = time.perf_counter()
            subprocess.run(
                cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
            )
            samples[name].append(time.perf_counter() - start)
    p50 = {name: statistics.median(s) * 1000 for name, s in samples.items()}
    result: dict[str, Any] = {
        "runs": runs,
        "load_1min": round(os.getloadavg()[0], 2),
        **{f"{name}_p50_ms": round(v, 1) for name, v in p50.items()},
    }
    for prefix in sources:
        result[f"{prefix}list_over_python"] = round(
            p50[f"{prefix}list_json"] / p50["python_c_pass"], 1
        )
        result[f"{prefix}hybrid_over_list"] = round(
            p50[f"{prefix}search_hybrid"] / p50[f"{prefix}list_json"], 2
        )
        result[f"{prefix}bm25_over_python"] = round(
            p50[f"{prefix}search_bm25"] / p50["python_c_pass"], 1
        )
    return result


REINDEX = """
import json, sys, time
start = time.perf_counter()
from toolcat import Catalog
report = Catalog(sys.argv[1], embedding_model=sys.argv[3]).reindex(batch_size=int(sys.argv[2]))
print(json.dumps({"tools_per_s": report.tools_per_second, "embedded": report.embedded,
                  "process_s": round(time.perf_counter() - start, 2),
                  "torch_loaded": "torch" in sys.modules}))
"""


def reindex_throughput(
    pool: list[dict[str, Any]], n: int, batch_size: int, tmp: Path, rounds: int = 2
) -> dict[str, Any]:
    """Encoding alone (in process, same texts): sentence-transformers in catalog order (the
    first reindex), shortest first (the reindex before the ONNX path), and the ONNX export
    shortest first (now); then whole ``toolcat reindex`` runs in fresh processes on copies of
    one catalog, sentence-transformers (``TOOLCAT_ONNX=0``) against the export, alternated."""
    import os
    import shutil

    raw = make_toolkits(pool, n)
    encoder = embedder(MODEL)
    db = tmp / "reindex.db"
    with Catalog(db, embedding_model=MODEL) as catalog:
        catalog.register(*[Toolkit.model_validate(t) for t in raw])
        texts = [
            embedding_text(Tool.model_construct(**json.loads(d)))
            for (_, d) in catalog._conn.execute(
                "SELECT t.content_hash, min(t.definition) FROM tools t GROUP BY t.content_hash "
                "ORDER BY min(t.id)"
            ).fetchall()
        ]
    shortest = sorted(texts, key=len)
    assert encoder.document_encoder() is not None, encoder.note
    ways = {
        "st_catalog_order": lambda chunk: encoder.model_encode(chunk, batch_size=batch_size),
        "st_shortest_first": lambda chunk: encoder.model_encode(chunk, batch_size=batch_size),
        "onnx_shortest_first": lambda chunk: encoder.encode(chunk, batch_size=batch_size),
    }
    for encode in ways.values():
        encode(texts[:batch_size])  # warm
    rates: dict[str, list[float]] = {name: [] for name in ways}
    whole: dict[str, list[dict[str, Any]]] = {"sentence_transformers": [], "onnx": []}
    for _ in range(rounds):
        for name, encode in ways.items():
            order = texts if name == "st_catalog_order" else shortest
            start = time.perf_counter()
            for i in range(0, len(order), batch_size):
                encode(order[i : i + batch_size])
            rates[name].append(len(texts) / (time.perf_counter() - start))
        for name, env in (("sentence_transformers", {"TOOLCAT_ONNX": "0"}), ("onnx", {})):
            copy = tmp / f"reindex-{name}.db"
            shutil.copy(db, copy)
            out = subprocess.run(
                [sys.executable, "-c", REINDEX, str(copy), str(batch_size), MODEL],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, **env},
            ).stdout
            whole[name].append(json.loads(out.strip().splitlines()[-1]))
            copy.unlink()
    encode_rates = {name: round(statistics.median(r), 1) for name, r in rates.items()}
    reindex_rates = {
        name: round(statistics.median(r["tools_per_s"] for r in runs), 1)
        for name, runs in whole.items()
    }
    return {
        "tools": len(texts),
        "batch_size": batch_size,
        "encode_tools_per_s": encode_rates,
        "onnx_over_st_shortest_first": round(
            encode_rates["onnx_shortest_first"] / encode_rates["st_shortest_first"], 2
        ),
        "onnx_over_st_catalog_order": round(
            encode_rates["onnx_shortest_first"] / encode_rates["st_catalog_order"], 2
        ),
        "reindex_tools_per_s": reindex_rates,
        "reindex_onnx_over_st": round(
            reindex_rates["onnx"] / reindex_rates["sentence_transformers"], 2
        ),
        "reindex_runs": whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--reindex-tools", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--cold-sizes", type=int, nargs="*", default=[1000, 10_000])
    parser.add_argument("--cold-runs", type=int, default=7, help="Interleaved rounds.")
    parser.add_argument(
        "--serving-rounds",
        type=int,
        default=1,
        help="Serving processes per precision (alternated with --baseline-src's): medians.",
    )
    parser.add_argument(
        "--cold-only",
        action="store_true",
        help="Only the cold one-shot commands, at --cold-sizes (no reindex, no serving).",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="Another checkout's src folder: its cold list and hybrid search, and its "
        "serving process, run beside this one's.",
    )
    parser.add_argument(
        "--model",
        default=MINILM,
        help="Embedding model of the catalogs (toolcat-tool-retriever-v1: the packaged one; "
        "the default, all-MiniLM-L6-v2, is also what code before it can load).",
    )
    args = parser.parse_args()
    global MODEL
    MODEL = args.model
    if args.cold_only:
        args.sizes, args.reindex_tools = [], 0
    embedder(MODEL).export_onnx()  # as reindex does
    pool, queries = tool_pool()
    rng = random.Random(SEED)
    sample = list(dict.fromkeys(rng.choice(queries) for _ in range(220)))[:200]
    cache: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.reindex_tools:
            reindexing = reindex_throughput(pool, args.reindex_tools, args.batch_size, Path(tmp))
            print(json.dumps({"reindex": reindexing}), flush=True)
        for size in sorted(set(args.sizes) | set(args.cold_sizes)):
            db = Path(tmp) / f"c{size}.db"
            catalog = build(db, size, pool, cache)
            result: dict[str, Any] = {"tools": size}
            if size in args.cold_sizes:
                result["cold"] = cold(db, sample[0], args.cold_runs, args.baseline_src)
            if size not in args.sizes:
                catalog.close()
                print(json.dumps(result), flush=True)
                continue
            short = [" ".join(q.split()[:8]) for q in sample]
            result["encode_query_only"] = encode_only(sample)
            result["hybrid_encoder_threads"] = encoder_threads(catalog, sample)
            # fp32 queries (TOOLCAT_ONNX_INT8=0) and int8 ones, alternated in one run.
            for int8 in (False, True):
                label = "int8" if int8 else "fp32"
                runs: dict[str, list[dict[str, Any]]] = {"": [], "baseline_": []}
                for _ in range(args.serving_rounds):  # alternated with the baseline's
                    runs[""].append(serving(db, sample, int8))
                    if args.baseline_src:
                        runs["baseline_"].append(serving(db, sample, int8, args.baseline_src))
                result[f"serving_{label}"] = median_runs(runs[""])
                if args.baseline_src:
                    base = result[f"baseline_serving_{label}"] = median_runs(runs["baseline_"])
                    result[f"serving_{label}_over_baseline"] = {
                        name: round(
                            result[f"serving_{label}"][name]["p50_ms"] / base[name]["p50_ms"], 3
                        )
                        for name in ("hybrid", "hybrid_8_words", "hybrid_repeated", "embedding")
                    }
                query_precision(int8)
                result[f"embedding_{label}"] = timed(catalog, sample, "embedding")
                result[f"hybrid_{label}"] = timed(catalog, sample, "hybrid")
                result[f"embedding_8_words_{label}"] = timed(catalog, short, "embedding")
                result[f"hybrid_8_words_{label}"] = timed(catalog, short, "hybrid")
            result["embedding_vector_cached"] = timed(catalog, sample, "embedding", cached=True)
            result["hybrid_vector_cached"] = timed(catalog, sample, "hybrid", cached=True)
            result["bm25"] = timed(catalog, sample, "bm25")
            result["hybrid_int8_over_fp32"] = {
                name: round(result[f"{name}_int8"]["p50_ms"] / result[f"{name}_fp32"]["p50_ms"], 3)
                for name in ("hybrid", "hybrid_8_words", "embedding", "embedding_8_words")
            }
            result["serving_hybrid_int8_over_fp32"] = round(
                result["serving_int8"]["hybrid"]["p50_ms"]
                / result["serving_fp32"]["hybrid"]["p50_ms"],
                3,
            )
            if size <= 10_000:
                runs = []
                for _ in range(3):
                    start = time.perf_counter()
                    report = catalog.reindex()
                    runs.append(time.perf_counter() - start)
                    assert report.embedded == 0
                result["no_change_reindex_s"] = round(statistics.median(runs), 3)
            catalog.close()
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
