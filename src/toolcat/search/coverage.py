"""A coverage-aware final ranking for requests split into parts (search/split.py).

A long request that needs several tools tends to fill its top hits with tools for its
strongest part. ``cover`` re-ranks the whole request's best ``COVER_DEPTH`` hits greedily:
each tool is assigned to the part it is closest to (its cosine to that part's vector, above
the part's own weakest candidate), and a tool whose part already has ``n`` tools above it
loses ``penalty * n`` of its (min-max normalised) fused score. The whole request's first hit
keeps its place. No vectors are read: each part's ranking already holds every candidate's
cosine to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

COVER_DEPTH = 20
COVER_PENALTY = 0.3
# Whether only the parts whose best tool fits them clearly (search/split.py ``fits``) count.
GATED = False


def assign(item: int, parts: Sequence[Mapping[int, float]], floors: Sequence[float]) -> int:
    """The part ``item`` serves best (-1: none of the parts' rankings holds it)."""
    best, best_gain = -1, 0.0
    for index, (cosines, floor) in enumerate(zip(parts, floors, strict=True)):
        cosine = cosines.get(item)
        if cosine is not None and cosine - floor > best_gain:
            best, best_gain = index, cosine - floor
    return best


def cover(
    whole: Sequence[tuple[int, float]],
    parts: Sequence[Mapping[int, float]],
    limit: int,
    penalty: float = COVER_PENALTY,
    depth: int = COVER_DEPTH,
) -> list[tuple[int, float]]:
    """``whole`` (best first) with its first ``depth`` hits re-ranked so that the parts
    (each a map of candidate to cosine with the part) share the top; scores stay those of
    the places."""
    if len(parts) < 2 or len(whole) < 2 or penalty <= 0:
        return list(whole[:limit])
    head = list(whole[:depth])
    high, low = head[0][1], head[-1][1]
    span = high - low or 1.0
    floors = [min(cosines.values(), default=0.0) for cosines in parts]
    served = {item: assign(item, parts, floors) for item, _ in head}
    taken = [0] * len(parts)
    order = [head[0][0]]
    if served[head[0][0]] >= 0:
        taken[served[head[0][0]]] += 1
    rest = head[1:]
    while rest and len(order) < limit:

        def gain(pair: tuple[int, float]) -> float:
            part = served[pair[0]]
            return (pair[1] - low) / span - (penalty * taken[part] if part >= 0 else 0.0)

        chosen = max(rest, key=gain)  # max keeps the first of equals: the whole's order
        rest.remove(chosen)
        order.append(chosen[0])
        if served[chosen[0]] >= 0:
            taken[served[chosen[0]]] += 1
    order += [item for item, _ in rest] + [item for item, _ in whole[depth:]]
    scores = [score for _, score in whole]
    return list(zip(order, scores, strict=False))[:limit]


# "fill": the top this many hits are where every part should have one.
FILL_TOP = 5


def fill(
    whole: Sequence[tuple[int, float]],
    parts: Sequence[Mapping[int, float]],
    limit: int,
    top: int = FILL_TOP,
    depth: int = COVER_DEPTH,
) -> list[tuple[int, float]]:
    """``whole`` (best first) where a part that has no tool in the first ``top`` hits gets
    its best-ranked tool of the first ``depth`` in, in place of the lowest of the top hits
    whose part has another above it (never the first hit); nothing moves when every part has
    a hit or no part has two. Scores stay those of the places."""
    if len(parts) < 2 or len(whole) <= top:
        return list(whole[:limit])
    floors = [min(cosines.values(), default=0.0) for cosines in parts]
    order = [item for item, _ in whole[:depth]]
    served = {item: assign(item, parts, floors) for item in order}
    for part in range(len(parts)):
        head = order[:top]
        if any(served[item] == part for item in head):
            continue
        below = [item for item in order[top:] if served[item] == part]
        counts = [sum(served[i] == served[item] for i in head) for item in head]
        crowded = [n for n in range(1, top) if served[head[n]] >= 0 and counts[n] >= 2]
        if not below or not crowded:
            continue
        out, moved = crowded[-1], below[0]
        displaced = order[out]
        order.remove(moved)
        order[out] = moved
        order.insert(top, displaced)  # the displaced tool is the first below the top
    order += [item for item, _ in whole[depth:]]
    scores = [score for _, score in whole]
    return list(zip(order, scores, strict=False))[:limit]
