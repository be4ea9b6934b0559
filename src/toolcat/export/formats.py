"""The LLM API formats ``toolcat.export`` writes tool definitions in, apart from the exporting
code: the CLI names them in its options without importing it."""

from __future__ import annotations

FORMATS = ("openai-chat", "openai-responses", "anthropic", "gemini", "mcp")
