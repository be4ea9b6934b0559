"""An agent loop on OpenAI's Responses API whose tool search is answered by toolcat.

The request carries the always-on tools and a client-executed ``tool_search`` tool. When the
model searches, toolcat's search answers with a ``tool_search_output`` item holding the found
tools (grouped by toolkit into namespaces); when the model calls one, ``Catalog.call`` runs it.

    python examples/openai_responses_agent.py "What are the prime factors of 360?"  # needs
        OPENAI_API_KEY and the openai package
    python examples/openai_responses_agent.py --replay examples/recorded/openai_responses.json

``--replay`` answers from recorded replies instead of the API (no network); each is parsed with
the openai package's ``Response`` type when it is installed. Without ``--db``, a temporary
catalog holds the sample toolkits of ``data/toolkits``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from toolcat import Catalog

ROOT = Path(__file__).resolve().parents[1]


class Replay:
    """Stands in for ``OpenAI().responses``: hands out recorded replies in order."""

    def __init__(self, path: Path) -> None:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        self.prompt: str = recorded["prompt"]
        self.replies: list[dict[str, Any]] = list(recorded["responses"])

    def create(self, **request: Any) -> dict[str, Any]:
        assert any(t.get("type") == "tool_search" for t in request["tools"]), "no search tool"
        reply = self.replies.pop(0)
        try:
            from openai.types.responses import Response
        except ImportError:
            return reply
        return Response.model_validate(reply).model_dump(mode="json", exclude_none=True)


def run(catalog: Catalog, prompt: str, responses: Any, model: str) -> str:
    """The loop; returns the model's final text."""
    exported = catalog.export(catalog.list(limit=1000), "openai-responses")
    tools = [*exported.tools, exported.search_tool()]
    items: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(10):
        reply = responses.create(model=model, input=items, tools=tools)
        output = reply["output"]
        items += output
        answered = False
        for item in output:
            if item["type"] == "tool_search_call" and item.get("execution") == "client":
                arguments = item["arguments"]
                hits = catalog.search(arguments["query"], k=int(arguments.get("limit", 5)))
                print(f"search {arguments['query']!r} -> {[h.tool.id for h in hits.hits]}")
                items.append(exported.tool_search_output(hits, item["call_id"]))
                answered = True
            elif item["type"] == "function_call":
                address = exported.address(item["name"], item.get("namespace"))
                result = catalog.call(address, json.loads(item["arguments"] or "{}"))
                print(f"call {address} -> {result.data if result.success else result.error}")
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": item["call_id"],
                        "output": json.dumps(result.model_dump(mode="json")),
                    }
                )
                answered = True
        if not answered:
            return "".join(
                part.get("text", "")
                for item in output
                if item["type"] == "message"
                for part in item["content"]
            )
    raise RuntimeError("no final answer after 10 turns")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", nargs="?", default=None)
    parser.add_argument("--db", type=Path, help="The catalog (default: the sample toolkits).")
    parser.add_argument("--replay", type=Path, help="Recorded replies to answer from.")
    parser.add_argument("--model", default="gpt-5.4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        catalog = Catalog(args.db or Path(tmp) / "catalog.db")
        if args.db is None:
            catalog.register(ROOT / "data" / "toolkits")
        if args.replay:
            replay = Replay(args.replay)
            prompt, responses = args.prompt or replay.prompt, replay
        else:
            from openai import OpenAI

            class Live:
                def __init__(self) -> None:
                    self.client = OpenAI()

                def create(self, **request: Any) -> dict[str, Any]:
                    reply = self.client.responses.create(**request)
                    return reply.model_dump(mode="json", exclude_none=True)

            prompt, responses = args.prompt or "What are the prime factors of 360?", Live()
        print(run(catalog, prompt, responses, args.model))
        catalog.close()


if __name__ == "__main__":
    main()
