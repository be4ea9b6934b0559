"""The search modes, apart from the search machinery: the CLI names them in its options
without importing what runs them."""

from __future__ import annotations

SEARCH_MODES = ("bm25", "embedding", "hybrid", "regex")
VECTOR_MODES = ("embedding", "hybrid")
