"""Combining rankings.

``hybrid_fusion`` (hybrid mode) mixes BM25 and embedding scores with a per-query weight taken
from what the query and the rankings say about themselves, no labels at query time:

- BM25 can only see the words of a request that some tool has: its weight shrinks with the
  share of the query's IDF mass on words no tool in the catalog has ("visibility"). In a team's
  few dozen tools "book me somewhere to eat tonight" shares one word with the catalog, so one
  word of name overlap (``book_flight``) cannot outweigh the embeddings' clear match; in a large
  catalog nearly every word is known and the weight stays.
- BM25 scores are min-max normalised over the top ``depth`` hits, but when BM25 returned fewer
  (every tool it matched), over [0, best]: the weakest of a handful of matches still matched.
- Every candidate gets a bonus for the share of its name the request spells out
  (IDF-weighted), so a request that names the tool still wins.
- Then a little of the raw cosine and of the cosine times the query coverage: min-max
  normalisation forgets how close the embeddings' best hits really are, and a tool that is
  both close and holds the request's words is likelier than one that is either alone.
- Where the two rankings part, a guard can move BM25's weight towards the surer one
  (``guarded_trust``); no shipped model turns it on.
- In a request split into parts (search/split.py), each part's best tool is raised by
  ``part_bonus`` in the whole request's ranking, up to just below its first hit
  (``lift_part_tops``).

The first three parameters (``HybridParams``) were chosen with scripts/research/tune_fusion.py
on half of each benchmark source's queries and checked on the other half (README, "Hybrid
fusion"); the last three were fitted on top of them by scripts/research/tune_rerank.py (pairwise
logistic over the candidates of the same half, every source's own and pooled catalog, plus the
small-catalog cases of tests/search/test_fusion.py), and checked on the other half and leaving
each source out of the fit (README, "Hybrid fusion"). Those are the base MiniLM's; a model
with cosines of its own scale has its own (``MODEL_PARAMS``: the packaged retriever's, refitted
leaving each source out by scripts/research/tune_loso.py).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

RRF_K = 60

Ranking = Sequence[tuple[int, float]]


def reciprocal_rank_fusion(
    rankings: Sequence[tuple[float, Ranking]],
    limit: int,
    k: int = RRF_K,
) -> list[tuple[int, float]]:
    """Fuse ``(weight, [(id, score), ...best first])`` rankings into one, best first.

    Each id scores ``sum(weight / (k + rank))`` over the rankings it appears in.
    """
    fused: dict[int, float] = {}
    for weight, ranking in rankings:
        for rank, (item, _score) in enumerate(ranking, 1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    ordered = sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))
    return ordered[:limit]


def score_fusion(
    rankings: Sequence[tuple[float, Ranking]],
    limit: int,
) -> list[tuple[int, float]]:
    """Fuse rankings by their scores: each list min-max normalised to [0, 1] (an id missing
    from a list gets 0 there), then weighted and summed."""
    fused: dict[int, float] = {}
    for weight, ranking in rankings:
        if not ranking:
            continue
        values = [score for _, score in ranking]
        low, high = min(values), max(values)
        span = high - low
        for item, score in ranking:
            normalised = (score - low) / span if span > 0 else 1.0
            fused[item] = fused.get(item, 0.0) + weight * normalised
    ordered = sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))
    return ordered[:limit]


@dataclass
class Candidate:
    """What fusion knows of one tool: its cosine, its query coverage and name hit, and
    (hybrid mode) its fused score and the query's weight on BM25."""

    semantic: float = 0.0  # cosine similarity (the list's lowest when not in the list)
    cover: float = 0.0  # IDF-weighted share of the query's terms in the tool's text
    name_cover: float = 0.0  # ... in the tool's name
    fused: float = 0.0
    trust: float = 0.5  # the query's weight on BM25
    name_hit: float = 0.0  # IDF-weighted share of the tool's name terms found in the query
    # ``cover`` over the query's distinctive terms (``distinctive``), how many the query has,
    # and whether one is in the tool's name: a word no tool has (a film's title, a file
    # name) is often the request's argument, a word most tools have tells nothing.
    known_cover: float = 0.0
    known_terms: int = 0
    known_in_name: bool = False


def idf(n_docs: int, doc_freq: int) -> float:
    """Inverse document frequency, positive for any term; a term no tool has counts as one
    that one tool has (it is part of the request, so a tool lacking it covers less)."""
    return math.log(1 + n_docs / max(doc_freq, 1))


# What fusion reads of one tool: (its tokenized name column, the query's terms the tool has
# in any column). Built from the in-memory index of the revision when there is one
# (engine.py), else from the tool's ``tools_fts`` row (``fts_document``).
Document = tuple[str, Collection[str]]


def fts_document(columns: Sequence[str], terms: Iterable[str]) -> Document:
    """A ``Document`` from a tool's tokenized FTS5 columns (the name first)."""
    # Columns are space-joined tokens: a substring test per query term is cheaper than
    # splitting every column of every candidate into sets (this runs ~100 times a query).
    text = f" {' '.join(columns)} "
    return columns[0], {t for t in terms if f" {t} " in text}


def coverage(
    terms: Sequence[str],
    weights: Mapping[str, float],
    columns: Sequence[str],
) -> tuple[float, float]:
    """(share of the query's IDF mass found anywhere in the document, ... in its name).

    ``columns`` are the document's tokenized FTS5 columns, the name first.
    """
    pairs = [(t, weights[t]) for t in terms]
    return _coverage(pairs, sum(w for _, w in pairs), fts_document(columns, terms))


def _coverage(
    pairs: Sequence[tuple[str, float]],
    total: float,
    document: tuple[str | Sequence[str], Collection[str]],
) -> tuple[float, float]:
    """``coverage`` of a ``Document``, or of one whose name is split already."""
    if not total:
        return 0.0, 0.0
    name = document[0].split() if isinstance(document[0], str) else document[0]
    found = document[1]
    in_name = anywhere = 0.0
    for term, weight in pairs:
        if term in name:
            in_name += weight
            anywhere += weight
        elif term in found:
            anywhere += weight
    return anywhere / total, in_name / total


# A tool name's distinct terms and their IDF summed: the same for every query at one catalog
# revision, so the engine keeps them (``hybrid_fusion``'s ``names``).
NameWeight = tuple[frozenset[str], float]


def name_weight(name: str, weights: Mapping[str, float]) -> NameWeight:
    """``name``'s distinct terms and their IDF (``weights``) summed."""
    words = frozenset(name.split())
    return words, sum(weights.get(w, 0.0) for w in words)


def _name_hit(terms: set[str], weights: Mapping[str, float], name: NameWeight) -> float:
    words, total = name
    return sum(weights.get(w, 0.0) for w in words if w in terms) / total if total else 0.0


def candidates(
    terms: Sequence[str],
    doc_freq: Mapping[str, int],
    n_docs: int,
    lexical: Ranking,
    semantic: Ranking,
    documents: Mapping[int, Document],
) -> dict[int, Candidate]:
    """Every tool either ranking returned, with its absolute signals."""
    log = math.log  # ``idf``, inline: this runs for every query term of every search
    weights = {t: log(1 + n_docs / max(doc_freq.get(t, 0), 1)) for t in terms}
    floor = semantic[-1][1] if semantic else 0.0
    found: dict[int, Candidate] = {}
    for item, score in semantic:
        found[item] = Candidate(semantic=score)
    for item, _score in lexical:
        if item not in found:
            found[item] = Candidate(semantic=floor)
    pairs = [(t, weights[t]) for t in terms]
    total = sum(w for _, w in pairs)
    rare = 0.5 * idf(n_docs, 1)  # ``distinctive``'s bar, with the weights at hand
    # Each term marked when it is one of the ``known`` (distinctive) ones: both coverages
    # in one pass, each sum in its own terms' order (as ``_coverage`` adds them).
    marked = [(t, w, doc_freq.get(t, 0) > 0 and w >= rare) for t, w in pairs]
    known_terms = sum(1 for *_, is_known in marked if is_known)
    known_total = sum(w for _, w, is_known in marked if is_known)
    for item, candidate in found.items():
        document = documents.get(item)
        if document is None:
            continue
        name, held = set(document[0].split()), document[1]
        in_name = anywhere = known_in_name = known_anywhere = 0.0
        for term, weight, is_known in marked:
            if term in name:
                in_name += weight
                anywhere += weight
                if is_known:
                    known_in_name += weight
                    known_anywhere += weight
            elif term in held:
                anywhere += weight
                if is_known:
                    known_anywhere += weight
        if total:
            candidate.cover, candidate.name_cover = anywhere / total, in_name / total
        if known_total:
            candidate.known_cover = known_anywhere / known_total
            candidate.known_in_name = known_in_name / known_total > 0
        candidate.known_terms = known_terms
    return found


def distinctive(n_docs: int, doc_freq: int) -> bool:
    """Whether a term some tools have is rare enough to tell them apart: its IDF at least
    half the largest (at 50 tools: in at most 8 of them; at 10,000: at most 100)."""
    return doc_freq > 0 and idf(n_docs, doc_freq) >= 0.5 * idf(n_docs, 1)


@dataclass(frozen=True)
class HybridParams:
    """The knobs of ``hybrid_fusion`` (chosen with scripts/research/tune_fusion.py)."""

    lexical_weight: float = 0.6  # BM25's share when every query word is known to the catalog
    visibility_power: float = 2.0  # ... times visibility ** this
    name_bonus: float = 0.2  # every candidate: plus this times its name hit
    # Fitted by scripts/research/tune_rerank.py (seed 0 halves of ../shared/bench, 600 queries
    # a source):
    cosine_weight: float = 0.096  # plus this times its cosine
    cosine_cover_weight: float = 0.101  # plus this times its cosine times its query coverage
    part_bonus: float = 0.208  # a part's best tool, in the whole request's ranking
    # The disagreement guard (``guarded_trust``): when the two rankings' top hits disagree,
    # BM25's weight moves by these times how far they disagree. 0: no guard.
    guard_bias: float = 0.0  # towards BM25 (> 0) or the embeddings (< 0) whatever the leads
    guard_lexical: float = 0.0  # times BM25's lead (1 - its second score / its first)
    guard_semantic: float = 0.0  # minus this times the embeddings' lead (first - second cosine)


# The base MiniLM's constants, fitted on its cosines; any model without its own entry below
# gets them.
HYBRID_PARAMS = HybridParams()
# Per model: a model's cosines have their own scale (the packaged retriever, trained with
# in-batch negatives, spreads them differently from the base MiniLM), so the constants that
# weigh them are fitted per model, leaving each benchmark source out
# (scripts/research/tune_loso.py; docs/benchmarks.md, "Fusion and 'nothing fits' for the
# retriever"). Keyed by model id (search/embeddings.py: RETRIEVER).
MODEL_PARAMS: dict[str, HybridParams] = {
    # BM25's weight 0.6 -> 0.7, the rest as the base MiniLM's: chosen alike leaving each
    # source out; the three constants its cosines move barely matter (±.002 mean R@5).
    "toolcat-tool-retriever-v1": HybridParams(lexical_weight=0.7),
}


def params_for(model_id: str) -> HybridParams:
    """The fusion constants fitted for ``model_id`` (the base MiniLM's when it has none)."""
    return MODEL_PARAMS.get(model_id, HYBRID_PARAMS)


GUARD_TOP = 5  # the top hits whose overlap says how far the rankings agree


def agreement(lexical: Ranking, semantic: Ranking, top: int = GUARD_TOP) -> float:
    """The share of each ranking's first ``top`` hits found in the other's first ``top``
    (1: the same tools, 0: none in common); 1 when either ranking is empty (nothing to
    disagree with)."""
    if not lexical or not semantic:
        return 1.0
    first = {item for item, _ in lexical[:top]}
    second = {item for item, _ in semantic[:top]}
    return len(first & second) / min(top, len(first), len(second))


def guarded_trust(trust: float, lexical: Ranking, semantic: Ranking, params: HybridParams) -> float:
    """BM25's weight ``trust`` moved towards the stronger ranking when the two disagree:
    by (1 - ``agreement``) times (``guard_bias`` + ``guard_lexical`` x BM25's lead -
    ``guard_semantic`` x the embeddings' lead), kept in [0, 1]. A lead is how far a ranking's
    first hit stands above its second: a ranking sure of its first hit, against one that is
    not, is the likelier to be right where they part. Labels play no part at query time.
    No shipped model sets the constants: fitted leaving each benchmark source out
    (scripts/research/tune_guard.py), they did not carry to the source left out
    (docs/benchmarks.md, "One catalog of everything")."""
    if not (params.guard_bias or params.guard_lexical or params.guard_semantic):
        return trust
    apart = 1.0 - agreement(lexical, semantic)
    if not apart:
        return trust
    lexical_lead = (
        1.0 - lexical[1][1] / lexical[0][1] if len(lexical) > 1 and lexical[0][1] > 0 else 1.0
    )
    semantic_lead = semantic[0][1] - semantic[1][1] if len(semantic) > 1 else 0.0
    shift = (
        params.guard_bias
        + params.guard_lexical * lexical_lead
        - params.guard_semantic * semantic_lead
    )
    return min(1.0, max(0.0, trust + apart * shift))


def hybrid_fusion(
    terms: Sequence[str],
    doc_freq: Mapping[str, int],
    n_docs: int,
    lexical: Ranking,
    semantic: Ranking,
    documents: Mapping[int, Document],
    depth: int,
    limit: int,
    params: HybridParams = HYBRID_PARAMS,
    names: Mapping[int, NameWeight] | None = None,
    trust: float | None = None,
) -> tuple[list[tuple[int, float]], dict[int, Candidate]]:
    """Fuse a BM25 and an embedding ranking (each at most ``depth`` hits, best first).

    ``doc_freq`` holds the document frequency of the query's terms and, unless ``names``
    gives each candidate's ``name_weight``, of the candidates' name terms. ``trust``, when
    given, is BM25's weight instead of the one the query's visibility and the guard decide
    (the fitting scripts try weights with it). Returns ((id, fused score) best first, the
    candidates with their signals).
    """
    found = candidates(terms, doc_freq, n_docs, lexical, semantic, documents)
    if not found:
        return [], found
    weights = {t: idf(n_docs, doc_freq.get(t, 0)) for t in [*terms, *doc_freq]}
    total = sum(weights[t] for t in terms)
    visibility = sum(weights[t] for t in terms if doc_freq.get(t, 0) > 0) / total if total else 0.0
    if trust is None:
        trust = guarded_trust(
            params.lexical_weight * visibility**params.visibility_power, lexical, semantic, params
        )
    lexical_part = _normalised(lexical, floor_at_zero=len(lexical) < depth)
    semantic_part = _normalised(semantic)
    query_terms = set(terms)
    for item, candidate in found.items():
        document = documents.get(item)
        if document is not None:
            name = names[item] if names is not None else name_weight(document[0], weights)
            candidate.name_hit = _name_hit(query_terms, weights, name)
        candidate.trust = trust
        cosine = candidate.semantic
        candidate.fused = (
            trust * lexical_part.get(item, 0.0)
            + (1 - trust) * semantic_part.get(item, 0.0)
            + params.name_bonus * candidate.name_hit
            + cosine * (params.cosine_weight + params.cosine_cover_weight * candidate.cover)
        )
    return _ordered(found, limit), found


def lift_part_tops(
    found: Mapping[int, Candidate],
    tops: Collection[int],
    limit: int,
    params: HybridParams = HYBRID_PARAMS,
) -> list[tuple[int, float]]:
    """The whole request's candidates (``hybrid_fusion``'s, fused scores raised in place)
    re-ranked after each of ``tops`` — the best tool of each part of the request — gained
    ``params.part_bonus``: a tool that best answers one part of a compound request belongs
    near the top of the whole, even where the part is too vague to join it by itself
    (``split.fits``). The whole request's first hit keeps its place: a lift stops just below
    it, since the tool that best answers the whole is still its likeliest first."""
    if not found:
        return []
    first, best = _ordered(found, 1)[0]
    ceiling = math.nextafter(best, -math.inf)
    for item in set(tops):
        candidate = found.get(item)
        if candidate is not None:
            lifted = candidate.fused + params.part_bonus
            candidate.fused = lifted if item == first else min(lifted, ceiling)
    return _ordered(found, limit)


def _ordered(found: Mapping[int, Candidate], limit: int) -> list[tuple[int, float]]:
    ordered = sorted(found.items(), key=lambda pair: (-pair[1].fused, pair[0]))
    return [(item, c.fused) for item, c in ordered[:limit]]


def _normalised(ranking: Ranking, floor_at_zero: bool = False) -> dict[int, float]:
    """Scores on [0, 1]: min-max over the list, or over [0, best] with ``floor_at_zero``."""
    if not ranking:
        return {}
    high = ranking[0][1]
    low = 0.0 if floor_at_zero else min(score for _, score in ranking)
    span = high - low
    return {item: (score - low) / span if span > 0 else 1.0 for item, score in ranking}
