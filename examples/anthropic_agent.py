"""An agent loop on Anthropic's Messages API whose tool search is answered by toolcat.

Every tool goes in the request, the deferred ones with ``defer_loading: true`` (Claude sees
only their names until they are loaded), beside a custom ``tool_search`` tool. When Claude
calls it, toolcat's search answers with a ``tool_result`` of ``tool_reference`` blocks, which
loads those tools; when Claude calls one, ``Catalog.call`` runs it. ``--search bm25`` (or
``regex``) sends Anthropic's own search tool instead, and the loop only runs the tools.

    python examples/anthropic_agent.py "What are the prime factors of 360?"  # needs
        ANTHROPIC_API_KEY and the anthropic package
    python examples/anthropic_agent.py --replay examples/recorded/anthropic.json
    python examples/anthropic_agent.py --search regex --replay examples/recorded/anthropic_regex.json

``--replay`` answers from recorded replies instead of the API (no network). Without ``--db``,
a temporary catalog holds the sample toolkits of ``data/toolkits``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from toolcat import Catalog

ROOT = Path(__file__).resolve().parents[1]
BETA = "advanced-tool-use-2025-11-20"


class Replay:
    """Stands in for ``Anthropic().beta.messages``: hands out recorded replies in order."""

    def __init__(self, path: Path) -> None:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        self.path = path
        self.prompt: str = recorded["prompt"]
        self.search_tool: str = recorded.get("search_tool", "tool_search")
        self.replies: list[dict[str, Any]] = list(recorded["responses"])

    def create(self, **request: Any) -> dict[str, Any]:
        names = {t["name"] for t in request["tools"]}
        if self.search_tool not in names:  # the recording answers another search tool
            raise SystemExit(
                f"{self.path} replays searches by {self.search_tool!r}, which this request "
                f"does not send; replay {RECORDINGS.get(_search_of(names), 'a recording of it')}"
            )
        return self.replies.pop(0)


# The recording that answers each --search choice (None: toolcat's own search tool).
RECORDINGS = {
    None: "examples/recorded/anthropic.json",
    "regex": "examples/recorded/anthropic_regex.json (with --search regex)",
}


def _search_of(names: set[str]) -> str | None:
    """The --search choice whose tool these request tool names include."""
    for kind in ("bm25", "regex"):
        if f"tool_search_tool_{kind}" in names:
            return kind
    return None


def run(catalog: Catalog, prompt: str, messages_api: Any, model: str, search: str | None) -> str:
    """The loop; returns Claude's final text."""
    exported = catalog.export(catalog.iter_tools(), "anthropic")
    tools = [*exported.tools, exported.search_tool(search)]
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(10):
        reply = messages_api.create(
            model=model, max_tokens=1024, messages=messages, tools=tools, betas=[BETA]
        )
        messages.append({"role": "assistant", "content": reply["content"]})
        results = []
        for block in reply["content"]:
            if block["type"] == "tool_search_tool_result":  # Anthropic searched (--search)
                found = block["content"].get("tool_references", [])
                names = [exported.address(ref["tool_name"]) for ref in found]
                print(f"search by Anthropic -> {names}")
            if block["type"] != "tool_use":
                continue
            if block["name"] == "tool_search":
                query = block["input"]["query"]
                hits = catalog.search(query, k=int(block["input"].get("limit", 5)))
                print(f"search {query!r} -> {[h.tool.id for h in hits.hits]}")
                content: Any = exported.tool_references(hits)
            else:
                address = exported.address(block["name"])
                result = catalog.call(address, block["input"])
                print(f"call {address} -> {result.data if result.success else result.error}")
                content = json.dumps(result.model_dump(mode="json"))
            results.append({"type": "tool_result", "tool_use_id": block["id"], "content": content})
        if not results:
            return "".join(b.get("text", "") for b in reply["content"] if b["type"] == "text")
        messages.append({"role": "user", "content": results})
    raise RuntimeError("no final answer after 10 turns")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", nargs="?", default=None)
    parser.add_argument("--db", type=Path, help="The catalog (default: the sample toolkits).")
    parser.add_argument("--replay", type=Path, help="Recorded replies to answer from.")
    parser.add_argument("--search", choices=["bm25", "regex"], help="Anthropic's search tool.")
    parser.add_argument("--model", default="claude-sonnet-4-5")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # A catalog named with --db must exist (a mistyped path is an error, not a new file).
        catalog = Catalog(args.db, create=False) if args.db else Catalog(Path(tmp) / "catalog.db")
        if args.db is None:
            catalog.register(ROOT / "data" / "toolkits")
        if args.replay:
            replay = Replay(args.replay)
            prompt, messages_api = args.prompt or replay.prompt, replay
        else:
            from anthropic import Anthropic

            class Live:
                def __init__(self) -> None:
                    self.client = Anthropic()

                def create(self, **request: Any) -> dict[str, Any]:
                    reply = self.client.beta.messages.create(**request)
                    return reply.model_dump(mode="json", exclude_none=True)

            prompt = args.prompt or "What are the prime factors of 360?"
            messages_api = Live()
        print(run(catalog, prompt, messages_api, args.model, args.search))
        catalog.close()


if __name__ == "__main__":
    main()
