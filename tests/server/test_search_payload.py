"""``search_tools``' text block is ``json.dumps`` of its structured answer, byte for byte,
though each hit's entry is encoded once and kept (``FoundTools``, ``payload_text``)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

pytest.importorskip("mcp")

from toolcat.models import RegisteredTool
from toolcat.server.mcp import FoundTools, payload_text

ODD = ['"', "\\", "\n", "\x00", "\x1b]0;x\x07", "é", "账", "🙂", "\ud800", "</script>", " "]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice([*ODD, "a", "B", "7", "_"]) for _ in range(rng.randint(0, 12)))


def _tool(rng: random.Random, n: int) -> RegisteredTool:
    properties = {
        _text(rng) or f"p{i}": {"type": "string", "description": _text(rng), "enum": [_text(rng)]}
        for i in range(rng.randint(0, 4))
    }
    return RegisteredTool.model_construct(  # odd texts a manifest may hold, unchecked
        name=f"tool_{n}",
        toolkit="kit",
        version="1.0",
        description=_text(rng) or "d",
        parameters={"type": "object", "properties": properties, "$schema": "x"},
    )


def test_the_text_is_json_dumps_of_the_answer() -> None:
    rng = random.Random(3)
    found = FoundTools()
    tools = [_tool(rng, n) for n in range(40)]
    for _ in range(300):
        hits = rng.sample(tools, rng.randint(0, 6))
        entries = [found.entry(t, rng.choice([t.name, f"kit.{t.name}", _text(rng)])) for t in hits]
        payload: dict[str, Any] = {
            "query": _text(rng),
            "mode": rng.choice(["bm25", "hybrid"]),
            "no_match": rng.random() < 0.5,
            "tools": [
                {
                    **entry,
                    "score": round(rng.choice([rng.uniform(-5, 40), 0.0, 1e-9, 12345678.9]), 4),
                    "match": rng.choice(["strong", "weak", "none"]),
                }
                for entry, _ in entries
            ],
        }
        if rng.random() < 0.3:
            payload["warnings"] = [_text(rng) for _ in range(rng.randint(1, 2))]
        assert payload_text(payload, [head for _, head in entries]) == json.dumps(payload)


def test_a_kept_entry_is_the_tools_own_and_its_schema_a_copy() -> None:
    tool = _tool(random.Random(5), 1)
    found = FoundTools()
    entry, head = found.entry(tool, "tool_1")
    assert found.entry(tool, "tool_1") == (entry, head)  # kept: the same objects
    assert json.loads(head + "}") == entry
    assert "$schema" not in entry["inputSchema"]
    entry["inputSchema"]["properties"]["forged"] = {}  # a copy: the tool is untouched
    assert "forged" not in tool.parameters["properties"]
