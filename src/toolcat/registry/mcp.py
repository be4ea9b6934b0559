"""Toolkits read from MCP servers: each tool forwards its calls to the server it came from."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..errors import ManifestError
from ..mcpclient import Endpoint, read_tools
from ..models import TOOL_NAME_RE, Toolkit
from ..names import fitted_name
from .manifest import toolkit_from_data


def toolkit_from_mcp(
    endpoint: Endpoint,
    toolkit: str,
    version: str,
    *,
    description: str | None = None,
    tags: Iterable[str] = (),
    defer_loading: bool = True,
    timeout: float = 30.0,
) -> Toolkit:
    """Connect to ``endpoint``, read its ``tools/list`` (every page) and build a toolkit.

    Tool names that do not fit the catalog's rule (``[A-Za-z0-9_-]{1,64}``) are rewritten;
    the implementation keeps the server's own name, so calls reach the right tool.

    Raises:
        ImportFailedError: The server cannot be started or does not answer in time.
        ManifestError: A tool the server lists is not valid (names the server, toolkit, tool
            and field), or the server lists no tools.
    """
    server, remote_tools = read_tools(endpoint, timeout)
    source = str(endpoint)
    if not remote_tools:
        raise ManifestError("the server lists no tools", file=source, toolkit=toolkit)
    taken: set[str] = set()
    tools = [_tool_data(raw, endpoint, taken) for raw in remote_tools]
    data: dict[str, Any] = {
        "toolkit": toolkit,
        "version": version,
        "description": description or _server_description(server, endpoint),
        "tags": ["mcp", *tags],
        "defer_loading": defer_loading,
        "tools": tools,
    }
    try:
        return toolkit_from_data(data)
    except ManifestError as e:
        raise e.in_file(source) from e


def _tool_data(raw: dict[str, Any], endpoint: Endpoint, taken: set[str]) -> dict[str, Any]:
    remote_name = str(raw.get("name", ""))
    name = remote_name if TOOL_NAME_RE.fullmatch(remote_name) and remote_name not in taken else ""
    if name:
        taken.add(name)
    else:
        name = fitted_name(remote_name, taken)
    annotations = raw.get("annotations") or {}
    description = (
        (raw.get("description") or "").strip() or raw.get("title") or annotations.get("title")
    )
    data: dict[str, Any] = {
        "name": name,
        "description": description or f"{remote_name} (the MCP server gave no description)",
        "parameters": raw.get("inputSchema", {"type": "object", "properties": {}}),
        "implementation": endpoint.implementation(remote_name),
    }
    if raw.get("outputSchema") is not None:
        data["output_schema"] = raw["outputSchema"]
    if annotations.get("idempotentHint"):
        data["idempotent"] = True
    hints = {
        "title": raw.get("title") or annotations.get("title"),
        "read_only": annotations.get("readOnlyHint"),
        "destructive": annotations.get("destructiveHint"),
        "open_world": annotations.get("openWorldHint"),
    }
    hints = {k: v for k, v in hints.items() if v is not None}
    if hints:
        data["annotations"] = hints
    return data


def _server_description(server: dict[str, Any], endpoint: Endpoint) -> str:
    name = server.get("title") or server.get("name") or endpoint.target
    version = server.get("version")
    text = f"Tools of the MCP server {name}" + (f" {version}" if version else "")
    return re.sub(r"\s+", " ", text)
