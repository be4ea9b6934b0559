"""Whether a change to warm BM25 search changes no answer, and what it saves, against
another checkout's toolcat (run it when a change claims both).

    python scripts/research/bm25_same_answers.py digest SRC DB SIZE [QUERIES]
    python scripts/research/bm25_same_answers.py paired OLD_SRC DB SIZE [PASSES]

``digest``: the toolcat under ``SRC`` (e.g. ``src`` or another worktree's ``src``) serves the
catalog ``DB`` (made by ``bench_scale.py --make-catalog`` with ``SIZE`` tools) as a server
does, then answers ``QUERIES`` (900) seeded queries with ``Catalog.search(mode="bm25")``:
unfiltered and with a tag filter at k = 1, 10 and 50, with a rare tag (the path that scores
every allowed tool), any-of tags, one toolkit, and excluded tags with deferred tools left
out at k = 10, plus 300 ``search_summaries`` per filter; every answer ranked (no kept
answer). Prints the SHA-1 of every field of every answer (ids, scores, order, match, each
hit's whole tool), per filter and in all, and tantivy's rounds (-1: a scan). Run it with
both sources: equal digests, equal answers.

``paired``: both toolcats in one process (the old one copied as ``toolcat_old``; toolcat's
imports are relative), two catalogs on ``DB``, warmed alike (1,500 queries), then the 300
queries ``bench_scale.py --bm25`` times, alternated one by one between the two, ``PASSES``
(1) times: thread CPU p50 / p99 / mean of each, and the median over queries of new / old.
On a shared machine this ratio is steadier than two separate runs.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_scale  # noqa: E402


def scopes(catalog: Any, size: int) -> dict[str, dict[str, Any]]:
    """The filters asked, on the generated catalogs' tags."""
    kit = catalog._conn.execute(
        "SELECT k.name FROM tools t JOIN toolkits k ON k.id = t.toolkit_id "
        "GROUP BY k.name ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()[0]
    return {
        "all": {},
        "python": {"tags": ["lang:python"]},
        "java": {"tags": ["simple_java"]},
        "any": {"any_tags": ["lang:java", "irrelevance"]},
        "kit": {"toolkit": kit},
        # ~1.2% of the tools: few enough that every allowed tool is scored (``_scan``)
        "small": {"tags": ["zoology"] if size < 50_000 else ["animals"]},
        "deny": {"exclude_tags": ["lang:java"], "include_deferred": False},
    }


def digest(src: str, db: str, size: int, count: int) -> None:
    sys.path.insert(0, src)
    toolcat = importlib.import_module("toolcat")
    assert str(Path(toolcat.__file__).resolve()).startswith(str(Path(src).resolve()))
    texts = bench_scale.queries(random.Random(bench_scale.SEED + size + 7), count)
    catalog = toolcat.Catalog(db)
    for q in texts[:40]:
        catalog.search(q, k=10, mode="bm25")
    catalog._search.postings.wait()
    for q in texts[:40]:
        catalog.search(q, k=10, mode="bm25")
    answers = bench_scale.kept_answers(catalog)
    total = hashlib.sha1()
    for name, scope in scopes(catalog, size).items():
        h = hashlib.sha1()
        ks = (1, 10, 50) if name in ("all", "python") else (10,)
        for k in ks:
            for q in texts:
                answers.clear()  # ranked, not kept
                h.update(catalog.search(q, k=k, mode="bm25", **scope).model_dump_json().encode())
        for q in texts[:300]:
            answers.clear()
            found = catalog.search_summaries(q, k=10, mode="bm25", **scope)
            h.update(json.dumps(found, sort_keys=True).encode())
        print(name, ks, h.hexdigest()[:16], flush=True)
        total.update(h.digest())
    index = catalog._search.postings.index
    print(type(index).__name__, "all", total.hexdigest(), "rounds", dict(index.rounds))


def paired(old_src: str, db: str, size: int, passes: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bm25-paired-"))
    try:
        shutil.copytree(Path(old_src) / "toolcat", folder / "toolcat_old")
        sys.path[:0] = [str(folder), str(ROOT / "src")]
        catalogs = {
            "old": importlib.import_module("toolcat_old").Catalog(db),
            "new": importlib.import_module("toolcat").Catalog(db),
        }
        texts = bench_scale.queries(random.Random(bench_scale.SEED + size), 600 + 1500)
        then, warm = texts[300:600], texts[600:]
        for catalog in catalogs.values():
            for q in warm[:20]:
                catalog.search(q, k=10, mode="bm25")
            catalog._search.postings.wait()
        for q in warm:
            for catalog in catalogs.values():
                catalog.search(q, k=10, mode="bm25")
        times: dict[str, list[float]] = {name: [] for name in catalogs}
        order = list(catalogs.items())
        for i, q in enumerate(then * passes):
            for name, catalog in order if i % 2 == 0 else order[::-1]:
                bench_scale.kept_answers(catalog).clear()
                started = time.thread_time()
                catalog.search(q, k=10, mode="bm25")
                times[name].append(time.thread_time() - started)
        out: dict[str, Any] = {}
        for name, taken in times.items():
            ordered = sorted(taken)
            out[name] = {
                "p50_ms": round(statistics.median(ordered) * 1e3, 3),
                "p99_ms": round(ordered[int(0.99 * len(ordered))] * 1e3, 3),
                "mean_ms": round(statistics.mean(ordered) * 1e3, 3),
            }
        ratios = [b / a for a, b in zip(times["old"], times["new"], strict=True)]
        out["new_over_old_median"] = round(statistics.median(ratios), 3)
        out["load"] = Path("/proc/loadavg").read_text().split()[0]
        print(json.dumps(out))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    if len(sys.argv) < 5 or sys.argv[1] not in ("digest", "paired"):
        print(__doc__)
        return
    what, src, db, size = sys.argv[1:5]
    extra = int(sys.argv[5]) if len(sys.argv) > 5 else None
    if what == "digest":
        digest(src, db, int(size), extra or 900)
    else:
        paired(src, db, int(size), extra or 1)


if __name__ == "__main__":
    main()
