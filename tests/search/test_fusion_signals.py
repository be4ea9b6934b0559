"""``fusion.candidates`` computes the signals of every hit in one pass over the query's
terms (a warm BM25 search runs it for each query): the values must be the two-pass
``_coverage`` ones bit for bit, or a hit's ``match`` could change at a threshold."""

from __future__ import annotations

import dataclasses
import random

import pytest

from toolcat.search.fusion import Candidate, Document, _coverage, candidates, idf


def two_pass(
    terms: list[str],
    doc_freq: dict[str, int],
    n_docs: int,
    lexical: list[tuple[int, float]],
    semantic: list[tuple[int, float]],
    documents: dict[int, Document],
) -> dict[int, Candidate]:
    """``candidates`` as it was before the one-pass loop (git 0874f1a)."""
    weights = {t: idf(n_docs, doc_freq.get(t, 0)) for t in terms}
    floor = semantic[-1][1] if semantic else 0.0
    found: dict[int, Candidate] = {}
    for item, score in semantic:
        found[item] = Candidate(semantic=score)
    for item, _score in lexical:
        found.setdefault(item, Candidate(semantic=floor))
    pairs = [(t, weights[t]) for t in terms]
    total = sum(w for _, w in pairs)
    rare = 0.5 * idf(n_docs, 1)
    known = [(t, w) for t, w in pairs if doc_freq.get(t, 0) > 0 and w >= rare]
    known_total = sum(w for _, w in known)
    for item, candidate in found.items():
        document = documents.get(item)
        if document is not None:
            split = (document[0].split(), document[1])
            candidate.cover, candidate.name_cover = _coverage(pairs, total, split)
            candidate.known_cover, in_name = _coverage(known, known_total, split)
            candidate.known_terms = len(known)
            candidate.known_in_name = in_name > 0
    return found


@pytest.mark.slow
def test_one_pass_signals_equal_the_two_pass_ones_bit_for_bit() -> None:
    rng = random.Random(32)
    vocabulary = [f"w{i}" for i in range(60)]
    compared = known_seen = 0
    for _ in range(3000):
        n_docs = rng.choice([3, 50, 10_000, 1_000_000])
        # some terms no tool has, some every tool has, duplicates in the query at times
        doc_freq = {w: rng.choice([0, 1, 2, 7, n_docs // 3, n_docs]) for w in vocabulary}
        terms = rng.choices(vocabulary, k=rng.randint(0, 32))
        if rng.random() < 0.5:
            terms = list(dict.fromkeys(terms))
        ids = rng.sample(range(1000), rng.randint(0, 60))
        split = rng.randint(0, len(ids))
        lexical = [(i, rng.random()) for i in ids[:split]]
        semantic = sorted(((i, rng.random()) for i in ids[split // 2 :]), key=lambda p: -p[1])
        documents: dict[int, Document] = {}
        for i in ids:
            if rng.random() < 0.9:  # a hit the index does not hold has no document
                name = " ".join(rng.choices(vocabulary + terms, k=rng.randint(0, 5)))
                # usually a superset of the name's query terms; not always (FTS5's columns)
                held = set(rng.sample(terms, min(len(terms), rng.randint(0, 8))))
                if rng.random() < 0.7:
                    held |= set(name.split()) & set(terms)
                documents[i] = (name, held)
        got = candidates(terms, doc_freq, n_docs, lexical, semantic, documents)
        want = two_pass(terms, doc_freq, n_docs, lexical, semantic, documents)
        assert list(got) == list(want)
        for item in want:
            # dataclass equality compares floats with ==: the same bits (no NaN here)
            assert dataclasses.astuple(got[item]) == dataclasses.astuple(want[item]), item
            known_seen += want[item].known_terms > 0
        compared += len(want)
    assert compared > 40_000 and known_seen > 10_000
