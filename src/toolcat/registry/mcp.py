"""Toolkits read from MCP servers: each tool forwards its calls to the server it came from, and
``drift`` compares what a server lists now with what the catalog registered."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..definitions.names import TOOL_NAME_RE, fitted_name
from ..errors import ManifestError, ToolcatError
from ..models import MAX_TOOLS_PER_TOOLKIT, RegisteredTool, Toolkit
from ..remote.mcp import (
    Endpoint,
    OnChange,
    RemoteTool,
    definition_changes,
    definition_digest,
    read_tools,
)
from .manifest import imported_toolkit


def toolkit_from_mcp(
    endpoint: Endpoint,
    toolkit: str,
    version: str,
    *,
    description: str | None = None,
    tags: Iterable[str] = (),
    defer_loading: bool = True,
    timeout: float = 30.0,
    on_change: OnChange = "refuse",
) -> Toolkit:
    """Connect to ``endpoint``, read its ``tools/list`` (every page) and build a toolkit.

    Tool names that do not fit the catalog's rule (``[A-Za-z0-9_-]{1,64}``) are rewritten;
    the implementation keeps the server's own name, so calls reach the right tool, and a hash
    of the description and input schema the server listed, which calls and ``toolcat check``
    compare with what the server lists later (``on_change``: refuse or only warn).

    Raises:
        ImportFailedError: The server cannot be started or does not answer in time.
        ManifestError: A tool the server lists is not valid (names the server, toolkit, tool
            and field), or the server lists no tools.
    """
    server, remote_tools = read_tools(endpoint, timeout)
    source = str(endpoint)
    if not remote_tools:
        raise ManifestError("the server lists no tools", file=source, toolkit=toolkit)
    if len(remote_tools) > MAX_TOOLS_PER_TOOLKIT:
        raise ManifestError(
            f"the server lists more than {MAX_TOOLS_PER_TOOLKIT:,} tools, the most a toolkit holds",
            file=source,
            toolkit=toolkit,
        )
    problems = [
        ManifestError(reason, file=source, toolkit=toolkit, tool=f"#{index}", field="name")
        for index, raw in enumerate(remote_tools, 1)
        for reason in [_name_problem(raw.get("name"))]
        if reason
    ]
    if problems:
        raise ManifestError.of(problems)
    taken: set[str] = set()
    tools = [_tool_data(raw, endpoint, taken, on_change) for raw in remote_tools]
    return imported_toolkit(
        source,
        toolkit=toolkit,
        version=version,
        description=description or _server_description(server, endpoint),
        tags=["mcp", *tags],
        defer_loading=defer_loading,
        tools=tools,
    )


MAX_REMOTE_NAME = 1024


def _name_problem(name: Any) -> str | None:
    """Why a tool name an MCP server listed cannot be called by, or ``None``."""
    if not isinstance(name, str) or not name.strip():
        return f"the server lists a tool with the name {name!r}, which cannot be called"
    if len(name) > MAX_REMOTE_NAME:
        return (
            f"the server lists a tool name of {len(name):,} characters (at most {MAX_REMOTE_NAME})"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"the server lists a tool name that is not valid text: {name!r}"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"the server lists a tool name holding a control character: {name!r}"
    return None


def _tool_data(
    raw: dict[str, Any], endpoint: Endpoint, taken: set[str], on_change: OnChange
) -> dict[str, Any]:
    remote_name = str(raw.get("name", ""))
    fits = TOOL_NAME_RE.fullmatch(remote_name) is not None
    name = remote_name if fits and remote_name not in taken else ""
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
        "implementation": endpoint.implementation(
            remote_name, definition=definition_digest(raw), on_change=on_change
        ),
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


def drift(
    endpoint: Endpoint, registered: dict[str, RemoteTool], timeout: float = 30.0
) -> tuple[dict[str, list[str]], list[str]]:
    """What ``endpoint`` lists now against what was registered (catalog tool id → its
    ``RemoteTool``).

    Returns:
        Catalog tool id → the problems found (``[]`` when unchanged), and the names of tools
        the server lists that no registered tool forwards to (added since).

    Raises:
        ImportFailedError: The server cannot be reached (or refuses the credentials).
    """
    _server, listed = read_tools(endpoint, timeout)
    by_name = {str(raw.get("name")): raw for raw in listed}
    problems: dict[str, list[str]] = {}
    for tool_id, remote in registered.items():
        raw = by_name.get(remote.name)
        if raw is None:
            problems[tool_id] = [f"removed: the server no longer lists {remote.name!r}"]
        elif remote.definition is None:
            problems[tool_id] = []  # registered before definitions were recorded
        else:
            changed = definition_changes(remote.definition, raw)
            problems[tool_id] = (
                [f"changed on the server since registration: {', '.join(changed)}"]
                if changed
                else []
            )
    forwarded = {remote.name for remote in registered.values()}
    added = sorted(name for name in by_name if name not in forwarded)
    return problems, added


def check_remote(tools: Iterable[RegisteredTool], *, trusted: bool) -> list[dict[str, Any]]:
    """``Catalog.check`` for tools imported from MCP servers: contact each server once and
    report, per tool, whether its definition there still matches the registered one, plus the
    tools the server added since (``{"id", "ok", "problems", "change"}``). A tool that would
    send this process's environment without being an import (``toolcat.remote.secrets``) is
    reported, its server not contacted, unless the catalog is ``trusted`` (trusts any
    module)."""
    from ..errors import ImportFailedError
    from ..remote.mcp import parse_implementation
    from ..remote.secrets import call_secret_problem

    by_server: dict[Endpoint, dict[str, RemoteTool]] = {}
    toolkits: dict[Endpoint, str] = {}
    report: list[dict[str, Any]] = []
    for tool in tools:
        refused = call_secret_problem(tool.implementation, tool.kind, trusted)
        if refused:
            report.append({"id": tool.id, "ok": False, "problems": [f"refused: {refused}"]})
            continue
        try:
            remote = parse_implementation(tool.implementation or "")
        except ImportFailedError as e:
            report.append({"id": tool.id, "ok": False, "problems": [str(e)]})
            continue
        by_server.setdefault(remote.endpoint, {})[tool.id] = remote
        toolkits.setdefault(remote.endpoint, tool.toolkit)
    for endpoint, registered in by_server.items():
        try:
            problems, added = drift(endpoint, registered)
        except ImportFailedError as e:
            report += [{"id": i, "ok": False, "problems": [str(e)]} for i in registered]
            continue
        for tool_id, found in problems.items():
            entry: dict[str, Any] = {"id": tool_id, "ok": not found, "problems": found}
            if found:
                entry["change"] = "removed" if found[0].startswith("removed") else "changed"
            report.append(entry)
        report += [
            {
                "id": f"{toolkits[endpoint]}.{name}",
                "ok": True,
                "problems": [],
                "change": "added",
                "note": f"the server lists {name!r}, which is not registered",
            }
            for name in added
        ]
    return report


def check_on_change(value: str) -> OnChange:
    if value not in ("refuse", "warn"):
        raise ToolcatError(f"on_change must be 'refuse' or 'warn', not {value!r}")
    return value  # type: ignore[return-value]
