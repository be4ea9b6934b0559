"""The plain baseline every search figure is held against: what a newcomer writes in fifty lines.

rank-bm25's ``BM25Okapi`` over each tool's name, description and parameter names and
descriptions (lowercased, split on non-alphanumerics, snake_case and camelCase, as
``../shared/bench/README.md`` says), the base MiniLM (``all-MiniLM-L6-v2``) over the same
text, and the two rankings fused by reciprocal rank (k = 60). Nothing here is tuned; toolcat's
own modes must beat it (``toolcat eval --baseline``, issue 22). The training script mines hard
negatives with the same BM25.

numpy and the model are imported only when asked for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ToolcatError

if TYPE_CHECKING:
    import numpy as np

    from ..models import Tool

RRF_K = 60
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def plain_tokens(text: str) -> list[str]:
    """Lowercase words, split on non-alphanumerics, snake_case and camelCase."""
    return [t for t in _NON_ALNUM.split(_CAMEL.sub(" ", text).lower()) if t]


def plain_text(tool: Tool) -> str:
    """Name, description, and each top-level parameter's name and description."""
    parts = [tool.name, tool.description]
    properties = tool.parameters.get("properties") or {}
    if isinstance(properties, dict):
        for name, prop in properties.items():
            parts.append(str(name))
            description = prop.get("description") if isinstance(prop, dict) else None
            if isinstance(description, str):
                parts.append(description)
    return " ".join(parts)


class PlainBM25:
    """rank-bm25's ``BM25Okapi`` over ``documents`` (name → text), with its defaults (k1 1.5,
    b 0.75, a negative idf raised to 0.25 x the mean idf), scored from per-term postings
    with numpy instead of its loop over every document for every query term: the same
    scores (tests/quality/test_baseline.py), fast enough to mine 15k training queries."""

    K1 = 1.5
    B = 0.75
    EPSILON = 0.25

    def __init__(self, documents: Mapping[str, str]) -> None:
        import math

        import numpy as np

        self.names = list(documents)
        counts: list[dict[str, int]] = []
        for name in self.names:
            tf: dict[str, int] = {}
            for token in plain_tokens(documents[name]):
                tf[token] = tf.get(token, 0) + 1
            counts.append(tf)
        lengths = np.array([sum(tf.values()) for tf in counts], dtype=np.float64)
        average = float(lengths.mean()) if len(lengths) and lengths.mean() > 0 else 1.0
        postings: dict[str, list[tuple[int, int]]] = {}
        for doc, tf in enumerate(counts):
            for token, n in tf.items():
                postings.setdefault(token, []).append((doc, n))
        total = len(self.names)
        idf = {
            t: math.log(total - len(p) + 0.5) - math.log(len(p) + 0.5) for t, p in postings.items()
        }
        floor = self.EPSILON * (sum(idf.values()) / len(idf)) if idf else 0.0
        norm = self.K1 * (1 - self.B + self.B * lengths / average)
        self._postings: dict[str, tuple[Any, Any]] = {}
        for token, pairs in postings.items():
            docs = np.array([d for d, _ in pairs], dtype=np.int64)
            tf_array = np.array([n for _, n in pairs], dtype=np.float64)
            weight = idf[token] if idf[token] >= 0 else floor
            self._postings[token] = (
                docs,
                weight * tf_array * (self.K1 + 1) / (tf_array + norm[docs]),
            )

    def scores(self, query: str) -> np.ndarray:
        """Every document's score, in document order (each query token counts each time)."""
        import numpy as np

        scores = np.zeros(len(self.names))
        for token in plain_tokens(query):
            found = self._postings.get(token)
            if found is not None:
                scores[found[0]] += found[1]
        return scores

    def rank(self, query: str, k: int) -> list[str]:
        """The ``k`` best names for ``query``, best first (ties in document order)."""
        import numpy as np

        scores = self.scores(query)
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        return [self.names[int(i)] for i in order]


def dense_rank(query: np.ndarray, names: Sequence[str], matrix: np.ndarray, k: int) -> list[str]:
    """The ``k`` names whose (normalised) rows of ``matrix`` are closest to ``query``."""
    import numpy as np

    scores = matrix @ query
    order = np.lexsort((np.arange(len(names)), -scores))[:k]
    return [names[int(i)] for i in order]


def rrf(rankings: Sequence[Sequence[str]], k: int, constant: int = RRF_K) -> list[str]:
    """Reciprocal rank fusion: each name scores the sum of 1 / (constant + rank)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, name in enumerate(ranking, 1):
            scores[name] = scores.get(name, 0.0) + 1.0 / (constant + rank)
    return sorted(scores, key=lambda n: -scores[n])[:k]


def base_model() -> Any:
    """The base MiniLM (sentence-transformers), loaded offline from its PyPI package."""
    from ..search.embeddings import MINILM, model_location

    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise ToolcatError(
            "the plain baseline needs sentence-transformers: pip install 'toolcat[train]'"
        ) from e
    return SentenceTransformer(model_location(MINILM), device="cpu")


def encode(model: Any, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Normalised float32 vectors of ``texts``."""
    import numpy as np

    vectors = model.encode(
        list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
    )
    return np.asarray(vectors, dtype=np.float32)
