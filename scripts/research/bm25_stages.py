"""Where a warm BM25 ``Catalog.search`` spends its time, beside tantivy, in CPU time.

bench_catalog.py's workload (same tools, seeded queries, same tantivy peer). Each query is
ranked (the engine's kept answers are dropped first), timed end to end and stage by stage
(the engine's methods wrapped with timers), with the in-memory index's core and tantivy
right after it. CPU time of the calling thread (``time.thread_time``), not wall time: the
machine this runs on is shared, and CPU time hides when other processes took the cores.
Three runs over the queries:

- ``new``: queries new to the process; the tools' words were stemmed at registration
  (as in bench_catalog.py);
- ``new_words``: a fresh draw of queries with the stem cache emptied first: a serving
  process that opened the catalog and has stemmed no word yet;
- ``repeated``: the ``new`` queries asked again (answers kept per revision).

    python scripts/research/bm25_stages.py --size 10000
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_catalog as bc  # noqa: E402
from toolcat import Catalog, Toolkit  # noqa: E402
from toolcat.search import bm25, engine, lexical_index  # noqa: E402
from toolcat.store import reader  # noqa: E402
from toolcat.text import tokenize as tokenize_module  # noqa: E402

STAGES: dict[str, list[float]] = {}


def timer(owner: Any, name: str, label: str) -> None:
    """Wrap ``owner.name`` so each call's CPU time goes to ``STAGES[label]``."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            STAGES.setdefault(label, []).append(time.thread_time() - start)

    setattr(owner, name, timed)


def p50_us(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e6, 1) if samples else 0.0


def run(catalog: Catalog, qs: list[str], ask_tantivy: Callable[[str], None]) -> dict[str, Any]:
    index = catalog._search.postings.index
    assert index is not None
    answers: dict[Any, Any] = getattr(catalog._search, "_answers", {})  # none before them
    whole, core, peer = [], [], []
    STAGES.clear()
    for q in qs:
        answers.clear()  # ranked, not a kept answer
        start = time.thread_time()
        catalog.search(q, k=10, mode="bm25")
        whole.append(time.thread_time() - start)
        terms = index.terms(q, bm25.MAX_QUERY_TERMS)
        start = time.thread_time()
        index.rank(terms, 10)
        core.append(time.thread_time() - start)
        start = time.thread_time()
        ask_tantivy(q)
        peer.append(time.thread_time() - start)
    stages = {
        k: {"per_query": round(len(v) / len(qs), 2), "p50_us": p50_us(v)} for k, v in STAGES.items()
    }
    return {
        "end_to_end_p50_us": p50_us(whole),
        "core_p50_us": p50_us(core),
        "tantivy_p50_us": p50_us(peer),
        "end_to_end_over_tantivy": round(p50_us(whole) / max(p50_us(peer), 1e-9), 2),
        "core_over_tantivy": round(p50_us(core) / max(p50_us(peer), 1e-9), 2),
        "stages (p50 of the calls)": stages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    args = parser.parse_args()
    pool, queries = bc.tool_pool()
    with tempfile.TemporaryDirectory() as tmp, Catalog(Path(tmp) / "c.db") as catalog:
        catalog.register(*[Toolkit.model_validate(t) for t in bc.make_toolkits(pool, args.size)])
        rng = random.Random(bc.SEED)
        qs = [rng.choice(queries) for _ in range(300)]
        for q in qs[:20]:
            catalog.search(q, mode="bm25")
        catalog._search.postings.wait()
        catalog.search(qs[0], mode="bm25")
        conn = sqlite3.connect(Path(tmp) / "c.db")
        peers, _ = bc.peer_bm25(conn)
        prepare, ask = peers["tantivy"]
        prepared: dict[str, Any] = {}

        def ask_tantivy(q: str) -> None:
            ask(prepared[q])

        for q in qs:
            prepared[q] = prepare(q)
        index_type = type(catalog._search.postings.index)
        for name in ("rank", "result", "_tools", "_rank", "bm25", "_documents"):
            timer(engine.SearchEngine, name, f"engine.{name}")
        timer(index_type, "rank", "core (index.rank)")
        timer(reader, "revision", "reader.revision")
        timer(reader, "tools_by_id", "reader.tools_by_id (hits not kept)")
        timer(tokenize_module, "tokenize", "tokenize")
        engine.tokenize = tokenize_module.tokenize  # the engine's and the index's name for it
        lexical_index.tokenize = tokenize_module.tokenize
        timer(Catalog, "searched", "Catalog.searched")
        stemmer = getattr(tokenize_module, "english_stemmer", None)
        out: dict[str, Any] = {"tools": args.size, "stemmer": repr(stemmer and stemmer())}
        out["new"] = run(catalog, qs, ask_tantivy)
        for q in qs:
            catalog.search(q, k=10, mode="bm25")
        out["repeated_p50_us"] = p50_us(
            [_timed(lambda q=q: catalog.search(q, k=10, mode="bm25")) for q in qs]
        )
        fresh = [rng.choice(queries) for _ in range(300)]
        for q in fresh:
            prepared[q] = prepare(q)
        tokenize_module._stem_cache.clear()
        out["new_words"] = run(catalog, fresh, ask_tantivy)
        conn.close()
    print(json.dumps(out, indent=1))


def _timed(fn: Callable[[], Any]) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


if __name__ == "__main__":
    main()
