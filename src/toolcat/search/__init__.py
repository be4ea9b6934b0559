"""Ranking tools for a query: tokenization and BM25 over FTS5."""
