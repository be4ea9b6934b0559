"""Benchmark the regex search mode before and after the repetition bounds
(toolcat.definitions.patterns).

On the sample catalog (data/toolkits, 37 tools), a seeded set of patterns built from the
tools' own words is searched with

- ``before``: the previous implementation (``regex.compile`` then ``search`` with a budget),
  copied here as the peer;
- ``after``: ``toolcat.search.regex.regex_search`` (length and repetition checked, then the
  same matching through ``toolcat.definitions.patterns``).

Both run warm (compiled patterns cached, as in a long-lived process) and cold (caches cleared
before every query: what a new pattern costs). Reported: p50/p99 per query and after/before.

    python scripts/bench_regex.py [--queries 200] [--repeat 5] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import regex  # noqa: E402

from toolcat import Catalog  # noqa: E402
from toolcat.definitions import patterns  # noqa: E402
from toolcat.search.regex import FIELD_WEIGHTS, regex_search  # noqa: E402
from toolcat.store.reader import Filters  # noqa: E402
from toolcat.text.documents import schema_texts  # noqa: E402


def before(conn: sqlite3.Connection, pattern: str, filters: Filters, k: int) -> list[Any]:
    """The regex mode as it was: compile with no bound on repetition, search with a budget."""
    compiled = regex.compile(pattern)
    where, params = filters.sql(active_only=True)
    rows = conn.execute(
        "SELECT t.id, t.name, t.definition FROM tools t JOIN toolkits k ON k.id = t.toolkit_id "
        f"WHERE {where} ORDER BY t.toolkit, t.name",
        params,
    ).fetchall()
    deadline = time.monotonic() + 2.0
    hits = []
    for row_id, name, definition in rows:
        data = json.loads(definition)
        fields = {
            "name": name,
            "description": data["description"],
            "params": "\n".join(schema_texts(data.get("parameters"))),
        }
        score = 0.0
        for field, weight in FIELD_WEIGHTS:
            if compiled.search(fields[field], timeout=deadline - time.monotonic()):
                score += weight
        if score:
            hits.append((row_id, score))
    hits.sort(key=lambda hit: -hit[1])
    return hits[:k]


def queries(conn: sqlite3.Connection, count: int, seed: int) -> list[str]:
    words = sorted(
        {
            w.lower()
            for (text,) in conn.execute("SELECT definition FROM tools")
            for w in re.findall(r"[A-Za-z]{4,}", json.loads(text)["description"])
        }
    )
    rng = random.Random(seed)
    shapes: list[Callable[[], str]] = [
        lambda: rng.choice(words),
        lambda: "(?i)" + rng.choice(words),
        lambda: f"{rng.choice(words)}.*{rng.choice(words)}",
        lambda: f"^{rng.choice(words)[:3]}",
        lambda: f"(?:{rng.choice(words)}|{rng.choice(words)})",
        lambda: rf"\b{rng.choice(words)[:4]}\w{{0,10}}",
        lambda: rf"\d{{1,3}}|{rng.choice(words)}",
    ]
    return [rng.choice(shapes)() for _ in range(count)]


def measure(
    conn: sqlite3.Connection, qs: list[str], repeat: int, cold: bool
) -> tuple[list[float], list[float]]:
    """Per-query times of before and after, interleaved (alternating which goes first) so
    that load on the machine falls on both alike."""
    filters = Filters()
    times: dict[str, list[float]] = {"before": [], "after": []}
    peers: dict[str, Callable[..., Any]] = {"before": before, "after": regex_search}
    for round_ in range(repeat):
        for i, q in enumerate(qs):
            order = ("before", "after") if (i + round_) % 2 else ("after", "before")
            for name in order:
                if cold:
                    regex.purge()
                    patterns._compile.cache_clear()
                started = time.perf_counter()
                peers[name](conn, q, filters, 10)
                times[name].append(time.perf_counter() - started)
    return times["before"], times["after"]


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        catalog = Catalog(Path(tmp) / "catalog.db")
        catalog.register(ROOT / "data" / "toolkits")
        conn = catalog._conn
        qs = queries(conn, args.queries, args.seed)
        for q in qs:  # same answers, so the comparison is like for like
            assert before(conn, q, Filters(), 10) == regex_search(conn, q, Filters(), 10), q
        report: dict[str, Any] = {"tools": 37, "queries": len(qs), "repeat": args.repeat}
        for mode in ("warm", "cold"):
            cold = mode == "cold"
            old_times, new_times = measure(conn, qs, args.repeat, cold)
            old, new = summary(old_times), summary(new_times)
            report[mode] = {
                "before": old,
                "after": new,
                "p50_ratio_after_over_before": round(new["p50_ms"] / old["p50_ms"], 3),
            }
        catalog.close()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
