"""Forwarding: the runtime's remote interface (``toolcat.runtime.remote``) implemented for
MCP servers and OpenAPI operations. ``install`` registers both; the clients are imported on
the first forwarded call, so installing costs nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..runtime import remote
from .schemes import MCP_PREFIX, OPENAPI_PREFIX


def _mcp(spec: str, tool_id: str) -> Callable[..., Any]:
    from .mcp import remote_tool  # light: the SDK is imported on the first call

    return remote_tool(spec, tool_id)


def _openapi(spec: str, tool_id: str) -> Callable[..., Any]:
    from .openapi import operation_tool  # light: httpx is imported on the first call

    return operation_tool(spec)  # type: ignore[no-any-return]


def _refusal(spec: str, kind: str | None) -> str | None:
    from .secrets import call_secret_problem

    return call_secret_problem(spec, kind, trusted=False)


def install() -> None:
    remote.register(MCP_PREFIX, _mcp, _refusal)
    remote.register(OPENAPI_PREFIX, _openapi, _refusal)
