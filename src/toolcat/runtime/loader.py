"""Importing implementations (``package.module:attr``), once per process."""

from __future__ import annotations

import importlib
import threading
from typing import Any

from ..errors import ImportFailedError

_cache: dict[str, Any] = {}
_lock = threading.Lock()


def load(spec: str | None, tool_id: str = "") -> Any:
    """The object ``spec`` (``package.module:attr.path``) names, imported on first use; for
    ``mcp+stdio:...#tool`` / ``mcp+http:...#tool``, a callable forwarding to that server; for
    ``openapi+http:BASE#PLAN``, a callable sending that HTTP request.

    Raises:
        ImportFailedError: No implementation, a module that fails to import (the exception
            is named), a missing attribute, or an object that cannot be called.
    """
    if not spec:
        raise ImportFailedError(f"tool {tool_id!r} has no implementation to call")
    found = _cache.get(spec)
    if found is not None:
        return found
    with _lock:  # two threads calling a new tool import its module once
        found = _cache.get(spec)
        if found is None:
            found = _import(spec, tool_id)
            _cache[spec] = found
    return found


def _import(spec: str, tool_id: str) -> Any:
    from ..mcpclient import is_remote, remote_tool  # light: the SDK is imported on first call
    from ..openapi_client import is_openapi, operation_tool  # light: httpx on first call

    if is_openapi(spec):  # a REST operation: a forwarder over a pooled httpx client
        return operation_tool(spec)
    if is_remote(spec):  # a tool of an MCP server: a forwarder, the server starts on first call
        return remote_tool(spec)
    module_name, _, attr_path = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except BaseException as e:  # an import can raise anything, SystemExit included
        raise ImportFailedError(
            f"cannot import module {module_name!r} for tool {tool_id!r}: {type(e).__name__}: {e}"
        ) from e
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise ImportFailedError(
                f"module {module_name!r} has no attribute {attr_path!r} (tool {tool_id!r})"
            ) from e
    if not callable(obj):
        raise ImportFailedError(
            f"{spec!r} is a {type(obj).__name__}, not something callable (tool {tool_id!r})"
        )
    return obj
