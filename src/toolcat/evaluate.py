"""Retrieval quality on public tool-retrieval benchmarks (the ``../shared/bench`` format).

Each source folder holds ``tools.jsonl`` and ``queries.jsonl``. The tools are registered
into a temporary catalog through the ordinary API and every query is answered by
``Catalog.search`` — there is no evaluation-only ranking path.

Names the catalog cannot take as they are (``math.factorial``, ``hf:org/model``,
``GET /movie/{id}``) are mapped to ``[A-Za-z0-9_-]{1,64}`` (other characters become ``_``;
long or colliding names get a short hash suffix) and counted. Parameter schemas that are not
valid JSON Schema are rebuilt from their property names and descriptions, and counted.
"""

from __future__ import annotations

import json
import math
import random
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .catalog import Catalog
from .errors import ToolcatError
from .models import Tool, Toolkit
from .names import fitted_name

K_VALUES = (1, 5, 10)


@dataclass
class Query:
    id: str
    text: str
    relevant: list[str]  # the gold tools (strict scoring)
    any_of: list[list[str]] | None  # per gold tool, every name that also counts (lenient)


@dataclass
class Source:
    """One benchmark source, with its tools mapped to catalog names."""

    name: str
    toolkit: Toolkit
    queries: list[Query]
    names_mapped: int = 0
    schemas_repaired: int = 0
    lenient: bool = False
    name_map: dict[str, str] = field(default_factory=dict)


def catalog_name(raw: str, taken: set[str]) -> str:
    """Map a benchmark tool name to a catalog tool name, uniquely within ``taken``."""
    return fitted_name(raw, taken)


def _repair_schema(parameters: Any) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    raw = parameters.get("properties") if isinstance(parameters, dict) else None
    for key, prop in (raw or {}).items():
        description = prop.get("description") if isinstance(prop, dict) else None
        properties[str(key)] = {"description": description} if isinstance(description, str) else {}
    return {"type": "object", "properties": properties}


def _toolkit_name(source: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", source.lower())[:64] or "source"


def load_source(folder: Path) -> Source:
    """Read one source folder into a ``Toolkit`` and its queries."""
    name = folder.name
    tools: list[Tool] = []
    taken: set[str] = set()
    name_map: dict[str, str] = {}
    mapped = repaired = 0
    for line in (folder / "tools.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        tool_name = catalog_name(raw["name"], taken)
        mapped += tool_name != raw["name"]
        name_map[raw["name"]] = tool_name
        tags = [
            t.strip()[:64]
            for t in [raw.get("toolkit") or "", *raw.get("tags", [])]
            if isinstance(t, str) and t.strip()
        ]
        definition = {
            "name": tool_name,
            "description": (raw.get("description") or "").strip() or raw["name"],
            "parameters": raw.get("parameters") or {"type": "object", "properties": {}},
            "tags": tags,
        }
        try:
            tools.append(Tool.model_validate(definition))
        except ValueError:
            definition["parameters"] = _repair_schema(definition["parameters"])
            tools.append(Tool.model_validate(definition))
            repaired += 1
    toolkit = Toolkit(name=_toolkit_name(name), version="1", description="", tools=tools)
    queries = []
    lenient = False
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        groups = raw.get("relevant_any_of")
        lenient = lenient or groups is not None
        queries.append(
            Query(
                id=str(raw["id"]),
                text=raw["query"],
                relevant=[name_map[n] for n in raw["relevant"] if n in name_map],
                any_of=None
                if groups is None
                else [[name_map[n] for n in group if n in name_map] for group in groups],
            )
        )
    return Source(name, toolkit, queries, mapped, repaired, lenient, name_map)


def source_folders(bench_dir: Path, only: Sequence[str] = ()) -> list[Path]:
    folders = sorted(
        p
        for p in bench_dir.iterdir()
        if (p / "tools.jsonl").is_file() and (p / "queries.jsonl").is_file()
    )
    if only:
        known = {p.name for p in folders}
        missing = [s for s in only if s not in known]
        if missing:
            raise ToolcatError(
                f"no source {', '.join(missing)} in {bench_dir}; have {sorted(known)}"
            )
        folders = [p for p in folders if p.name in only]
    if not folders:
        raise ToolcatError(f"no benchmark sources (tools.jsonl + queries.jsonl) in {bench_dir}")
    return folders


def score_query(ranked: Sequence[str], relevant: Sequence[Sequence[str]]) -> dict[str, float]:
    """Recall@1/5/10, nDCG@10 and MRR@10 for one query (binary relevance).

    ``relevant`` holds one group per gold tool: retrieving any member of a group finds it,
    once. Strict scoring passes one-member groups.
    """
    groups = [set(g) for g in relevant if g]
    if not groups:
        return {}
    found_at: dict[int, int] = {}  # group index -> rank (1-based) where first found
    gains: list[float] = []
    for rank, tool in enumerate(ranked[:10], 1):
        gain = 0.0
        for i, group in enumerate(groups):
            if i not in found_at and tool in group:
                found_at[i] = rank
                gain = 1.0
                break
        gains.append(gain)
    scores = {f"R@{k}": sum(1 for r in found_at.values() if r <= k) / len(groups) for k in K_VALUES}
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(groups), 10)))
    scores["nDCG@10"] = dcg / ideal
    scores["MRR@10"] = 1 / min(found_at.values()) if found_at else 0.0
    return scores


def _average(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = [r for r in rows if r]
    keys = [f"R@{k}" for k in K_VALUES] + ["nDCG@10", "MRR@10"]
    return {k: round(sum(r[k] for r in rows) / len(rows), 4) if rows else 0.0 for k in keys}


def evaluate(
    bench_dir: str | Path,
    *,
    sources: Sequence[str] = (),
    modes: Sequence[str] = ("bm25",),
    pooled: bool = False,
    max_queries: int | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Score search modes on benchmark sources.

    Args:
        bench_dir: Folder of sources in the ``../shared/bench`` format.
        sources: Only these sources (folder names); default all.
        modes: Search modes to score.
        pooled: Search every source's queries against all sources' tools in one catalog.
        max_queries: Score a seeded sample of at most this many queries per source.
        seed: Seed of that sample.

    Returns:
        One row per source and mode: ``source``, ``mode``, ``queries``, ``R@1``, ``R@5``,
        ``R@10``, ``nDCG@10``, ``MRR@10`` (strict), plus lenient figures where the source
        has alternatives (``lenient``), and the catalog's name mapping counts.
    """
    loaded = [load_source(f) for f in source_folders(Path(bench_dir), sources)]
    results: list[dict[str, Any]] = []
    needs_vectors = any(m in ("embedding", "hybrid") for m in modes)
    with tempfile.TemporaryDirectory(prefix="toolcat-eval-") as tmp:
        if pooled:
            with Catalog(Path(tmp) / "pooled.db") as catalog:
                catalog.register(*(s.toolkit for s in loaded))
                if needs_vectors:
                    catalog.reindex()
                for source in loaded:
                    results += _run(catalog, source, modes, max_queries, seed, pooled=True)
        else:
            for source in loaded:
                with Catalog(Path(tmp) / f"{source.toolkit.name}.db") as catalog:
                    catalog.register(source.toolkit)
                    if needs_vectors:
                        catalog.reindex()
                    results += _run(catalog, source, modes, max_queries, seed, pooled=False)
    return results


def _run(
    catalog: Catalog,
    source: Source,
    modes: Sequence[str],
    max_queries: int | None,
    seed: int,
    *,
    pooled: bool,
) -> list[dict[str, Any]]:
    queries = source.queries
    if max_queries is not None and len(queries) > max_queries:
        queries = random.Random(seed).sample(queries, max_queries)
    prefix = f"{source.toolkit.name}." if pooled else ""
    rows = []
    for mode in modes:
        strict, lenient = [], []
        for query in queries:
            hits = catalog.search(query.text, mode=mode, k=10).hits
            ranked = [h.tool.id if pooled else h.tool.name for h in hits]
            strict.append(score_query(ranked, [[prefix + n] for n in query.relevant]))
            if query.any_of is not None:
                lenient.append(score_query(ranked, [[prefix + n for n in g] for g in query.any_of]))
        row: dict[str, Any] = {
            "source": source.name,
            "mode": mode,
            "pooled": pooled,
            "queries": len(queries),
            **_average(strict),
            "names_mapped": source.names_mapped,
            "schemas_repaired": source.schemas_repaired,
        }
        if source.lenient:
            row["lenient"] = _average(lenient)
        rows.append(row)
    return rows
