"""Measure query-time additions to hybrid fusion on held-out halves: pseudo-relevance feedback
on the query vector, a toolkit prior, fusion depth.

Reads scripts/research/gather_rankings.py's rankings (run with ``--vectors V.npz``, which
saves every tool's and query's vector), splits each source's queries in two with the seed of
scripts/research/tune_fusion.py and prints, for each variant given, R@5 per source on one half (0:
the half to choose settings on, 1: the held-out half), own and pooled catalogs, all queries
and those with two or more relevant tools. Fusion is ``fusion.hybrid_fusion`` with the
shipped parameters and ``split.fits``/``split.merge``, as in the search engine.

    python scripts/research/tune_feedback.py RANKINGS.json VECTORS.npz [--half 0|1] [--seed 0]
        [--variant NAME=ALPHA,TOP,GAMMA,TK[,DEPTH[,PART_TOP]]]...
        [--tool-vectors V.npz | --extra V.npz --margin M] [--qpp BETA]

A variant: Rocchio feedback (the query vector plus ALPHA times the mean vector of the first
TOP fused hits, re-ranked over every tool's vector), a toolkit prior (each candidate plus GAMMA
times its toolkit's share of the first TK fused hits), the embedding list's depth (above 50 only
where feedback re-ranks every tool), and how many
of each part's best tools may join (``split.merge``). ``--tool-vectors`` ranks by other tool
vectors (another embedding document: keys ``toolkit.name`` and vectors, as ``--vectors``
saves them); ``--extra`` gives each tool a second vector, its cosine the higher of the two
(the second counted ``--margin`` lower); a file that repeats a tool's key gives it several
(``gather_rankings.py --chunks``: a multi-vector document, its cosine the best of them).
``--qpp`` multiplies the query's BM25 weight by
(z-score of BM25's best hit / z-score of the embeddings' best hit) ** BETA.
Every variant is scored on the half ``--half``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts" / "research"))

import numpy as np  # noqa: E402

from toolcat.search import split  # noqa: E402
from toolcat.search.fusion import HYBRID_PARAMS, hybrid_fusion  # noqa: E402
from tune_fusion import DEPTH, Catalog, halves, prepare, r5  # noqa: E402

Row = dict[str, Any]
Rule = Callable[[Row], list[int]]


class Space:
    """One catalog's tool vectors, row ``i`` for the catalog's id ``i``."""

    def __init__(self, catalog: Catalog, matrix: np.ndarray) -> None:
        self.catalog = catalog
        self.matrix = matrix
        self.extra: np.ndarray | None = None  # more vectors per tool: cosine = the max
        self.extra_owner: np.ndarray | None = None  # the tool row of each extra vector
        self.margin = 0.0
        self.prefix = ""
        self.toolkit = [k.split(".", 1)[0] if "." in k else "" for k in catalog.keys]

    def ranking(self, vector: np.ndarray, depth: int) -> list[tuple[int, float]]:
        scores = self.matrix @ vector
        if self.extra is not None and self.extra_owner is not None:
            scores = scores.copy()
            np.maximum.at(scores, self.extra_owner, self.extra @ vector - self.margin)
        top = np.argpartition(-scores, depth - 1)[:depth]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(i), float(scores[i])) for i in top]


def load(
    path: Path, vectors: Path, tool_vectors: Path | None = None
) -> tuple[dict[str, dict[str, list[Row]]], dict[str, Space]]:
    data = json.loads(path.read_text())
    npz = np.load(vectors)
    other = np.load(tool_vectors) if tool_vectors else npz
    tool_index = {str(k): i for i, k in enumerate(other["tool_keys"])}
    tools = other["tool_vectors"]
    query_vectors = npz["query_vectors"]  # each npz[...] reads the file again: once
    qvec = {str(t): query_vectors[i] for i, t in enumerate(npz["query_texts"])}
    pooled = Catalog(data["pooled_docs"])
    out: dict[str, dict[str, list[Row]]] = {}
    spaces: dict[str, Space] = {}

    def space(catalog: Catalog, prefix: str) -> Space:
        rows = [tool_index[prefix + k] for k in catalog.keys]
        found = Space(catalog, tools[rows])
        found.prefix = prefix
        return found

    spaces["pooled"] = space(pooled, "")
    for setting in ("own", "pooled"):
        out[setting] = {}
        for name, entry in data[setting].items():
            catalog = pooled if setting == "pooled" else Catalog(entry["docs"])
            if setting == "own":
                spaces[name] = space(catalog, data["prefixes"][name])
            rows = []
            for q in entry["queries"]:
                row = prepare(catalog, q["text"], q["lex"], q["sem"])
                row.update(id=q["id"], vector=qvec[q["text"]], catalog=catalog)
                row["space"] = spaces["pooled" if setting == "pooled" else name]
                row["relevant"] = [catalog.ids.get(n, -1) for n in q["relevant"]]
                row["parts"] = []
                for p in q["parts"]:
                    part = prepare(catalog, p["text"], p["lex"], p["sem"])
                    part.update(vector=qvec[p["text"]], catalog=catalog, space=row["space"])
                    row["parts"].append(part)
                rows.append(row)
            out[setting][name] = rows
    if tool_vectors:  # embedding rankings from these tool vectors
        for sources in out.values():
            for rows in sources.values():
                for row in rows:
                    for q in [row, *row["parts"]]:
                        q["semantic"] = q["space"].ranking(q["vector"], DEPTH)
    return out, spaces


def add_extra(
    data: dict[str, dict[str, list[Row]]], spaces: dict[str, Space], path: Path, margin: float
) -> None:
    """More vectors per tool (from ``path``, a key per vector); a tool's cosine is the highest,
    the extra ones counted ``margin`` lower. Recomputes every embedding ranking."""
    npz = np.load(path)
    keys = [str(k) for k in npz["tool_keys"]]
    extra = npz["tool_vectors"]
    for space in spaces.values():
        row = {space.prefix + k: i for i, k in enumerate(space.catalog.keys)}
        mine = [i for i, k in enumerate(keys) if k in row]
        space.extra = extra[mine]
        space.extra_owner = np.array([row[keys[i]] for i in mine], dtype=np.int64)
        space.margin = margin
    for sources in data.values():
        for rows in sources.values():
            for row in rows:
                for q in [row, *row["parts"]]:
                    q["semantic"] = q["space"].ranking(q["vector"], DEPTH)


def fuse(
    q: Row, semantic: Sequence[tuple[int, float]] | None = None, limit: int = 10, depth: int = DEPTH
) -> Any:
    sem = list(semantic if semantic is not None else q["semantic"])[:depth]
    ids = {i for i, _ in q["lexical"]} | {i for i, _ in sem}
    catalog: Catalog = q["catalog"]
    documents = {i: catalog.columns[i] for i in ids}
    names = {t for i in ids for t in catalog.columns[i][0].split()}
    doc_freq = {t: catalog.df.get(t, 0) for t in [*q["terms"], *names]}
    found, signals = hybrid_fusion(
        q["terms"], doc_freq, q["n"], q["lexical"], sem, documents, DEPTH, 10_000, HYBRID_PARAMS
    )
    if QPP[0] and q["lexical"] and sem and signals:
        found = _qpp(q["lexical"], sem, signals, QPP[0])
    return found[:limit], signals


QPP = [0.0]  # exponent of the per-query trust from the lists' top-hit z-scores (0: off)


def _z(ranking: Sequence[tuple[int, float]]) -> float:
    values = np.array([s for _, s in ranking], dtype=float)
    return float((values[0] - values.mean()) / (values.std() + 1e-9)) if len(values) > 2 else 1.0


def _qpp(lexical: Any, semantic: Any, signals: Any, beta: float) -> list[tuple[int, float]]:
    """Re-weigh the lists per query by how far each list's best hit stands out (z-score)."""
    from toolcat.search.fusion import _normalised

    trust = next(iter(signals.values())).trust
    ratio = max(_z(lexical), 1e-3) / max(_z(semantic), 1e-3)
    trust = min(0.9, max(0.05, trust * ratio**beta))
    lex = _normalised(lexical, floor_at_zero=len(lexical) < DEPTH)
    sem = _normalised(semantic)
    scored = [
        (
            i,
            trust * lex.get(i, 0.0)
            + (1 - trust) * sem.get(i, 0.0)
            + HYBRID_PARAMS.name_bonus * c.name_hit,
        )
        for i, c in signals.items()
    ]
    return sorted(scored, key=lambda p: (-p[1], p[0]))


def prf_ranking(q: Row, alpha: float, top: int, depth: int) -> list[tuple[int, float]]:
    """The embedding ranking for the query vector plus ``alpha`` times the mean vector of
    the first fused hits (Rocchio)."""
    if alpha == 0:
        return list(q["semantic"])
    found, _ = fuse(q, limit=top)
    space: Space = q["space"]
    centroid = space.matrix[[i for i, _ in found]].mean(axis=0)
    vector = q["vector"] + alpha * centroid
    vector = vector / np.linalg.norm(vector)
    return space.ranking(vector, depth)


def toolkit_prior(q: Row, fused: list[tuple[int, float]], gamma: float, top: int) -> Any:
    """Each candidate plus ``gamma`` times its toolkit's share of the first ``top`` hits."""
    if gamma == 0:
        return fused
    toolkit = q["space"].toolkit
    share: dict[str, float] = {}
    for i, _ in fused[:top]:
        share[toolkit[i]] = share.get(toolkit[i], 0.0) + 1 / top
    scored = [(i, s + gamma * share.get(toolkit[i], 0.0)) for i, s in fused]
    return sorted(scored, key=lambda p: (-p[1], p[0]))


def rule(
    alpha: float = 0.0,
    prf_top: int = 3,
    gamma: float = 0.0,
    tk_top: int = 10,
    depth: int = 50,
    part_top: int = 1,
) -> Rule:
    def ranked(q: Row, limit: int) -> tuple[list[tuple[int, float]], Any]:
        semantic = prf_ranking(q, alpha, prf_top, depth)
        found, signals = fuse(q, semantic, limit=1000, depth=depth)
        found = toolkit_prior(q, found, gamma, tk_top)
        return found[:limit], signals

    def rank(q: Row) -> list[int]:
        whole, _ = ranked(q, 10)
        levels: list[list[list[tuple[int, float]]]] = [[] for _ in range(part_top)]
        for part in q["parts"]:
            found, signals = ranked(part, part_top)
            for level, (item, _) in enumerate(found):
                if split.fits(signals[item].semantic, signals[item].cover):
                    levels[level].append([(item, 0.0)])
        per_part = [ranking for level in levels for ranking in level]
        return [i for i, _ in split.merge(whole, per_part, 10)]

    return rank


def mean_r5(rr: Rule, data: dict[str, dict[str, list[Row]]], seed: int, half: int) -> Any:
    cells = {}
    for setting, sources in data.items():
        for name, rows in sorted(sources.items()):
            cells[(setting, name)] = r5(rr, halves(rows, seed, name)[half])
    return cells


def report(label: str, cells: dict[tuple[str, str], float]) -> None:
    for setting in ("own", "pooled"):
        row = {n: v for (s, n), v in cells.items() if s == setting and v == v}
        mean = sum(row.values()) / len(row)
        print(
            f"{label:<28} {setting:<6} {mean:.3f} "
            + " ".join(f"{n[:9]}={v:.3f}" for n, v in row.items()),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rankings")
    parser.add_argument("vectors")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--half", type=int, default=0, help="0: the fitting half, 1: held out")
    parser.add_argument("--tool-vectors", help="Tool vectors to rank by instead (.npz).")
    parser.add_argument("--extra", help="More vectors per tool (.npz): cosine = the max.")
    parser.add_argument("--margin", type=float, default=0.0)
    parser.add_argument("--qpp", type=float, default=0.0, help="Per-query trust exponent.")
    parser.add_argument(
        "--variant", action="append", default=[], help="name=alpha,top,gamma,tk[,depth[,part_top]]"
    )
    args = parser.parse_args()
    tool_vectors = Path(args.tool_vectors) if args.tool_vectors else None
    data, spaces = load(Path(args.rankings), Path(args.vectors), tool_vectors)
    if args.extra:
        add_extra(data, spaces, Path(args.extra), args.margin)
    QPP[0] = args.qpp
    variants = args.variant or ["base=0,3,0,10"]
    for v in variants:
        label, _, values = v.partition("=")
        a, t, g, k, *d = values.split(",")
        rr = rule(float(a), int(t), float(g), int(k), *(int(x) for x in d))
        report(label, mean_r5(rr, data, args.seed, args.half))
        multi = {
            key: r5(rr, halves(rows, args.seed, key[1])[args.half], multi=True)
            for key, rows in ((k2, data[k2[0]][k2[1]]) for k2 in _keys(data))
        }
        report(label + " multi", multi)


def _keys(data: dict[str, dict[str, list[Row]]]) -> list[tuple[str, str]]:
    return [(s, n) for s, sources in data.items() for n in sorted(sources)]


if __name__ == "__main__":
    main()
