"""Importing implementations (``package.module:attr``), once per process."""

from __future__ import annotations

import importlib
import threading
import types
from typing import Any

from ..definitions.importpath import searched
from ..errors import ImportFailedError, ToolDeniedError
from ..models import IMPLEMENTATION_RE
from ..policy.trust import is_python_implementation, root_problem, under_root
from . import remote

_cache: dict[str, Any] = {}
_lock = threading.Lock()
_UNCHECKED = object()  # ``root`` when the caller trusts any module


def load(spec: str | None, tool_id: str = "", *, root: Any = _UNCHECKED) -> Any:
    """The object ``spec`` (``package.module:attr.path``) names, imported on first use; for
    ``mcp+stdio:...#tool`` / ``mcp+http:...#tool``, a callable forwarding to that server; for
    ``openapi+http:BASE#PLAN``, a callable sending that HTTP request.

    Args:
        spec: The implementation string.
        tool_id: For messages.
        root: The toolkit's import root (its ``module``, ``None`` when it declares none).
            When given, a Python implementation must lie under it and outside the standard
            library, and so must every module on its attribute path and the module that
            defines the object found; otherwise nothing is imported. Leave it out only for
            a catalog that trusts any module.

    Raises:
        ToolDeniedError: ``spec`` lies outside ``root`` (a catalog row edited behind
            toolcat's back, say); nothing was imported.
        ImportFailedError: No implementation, a module that fails to import (the exception
            is named), a missing attribute, or an object that cannot be called.
    """
    if not spec:
        raise ImportFailedError(f"tool {tool_id!r} has no implementation to call")
    if not IMPLEMENTATION_RE.fullmatch(spec):
        raise ImportFailedError(f"tool {tool_id!r} has a malformed implementation {spec!r}")
    checked = root is not _UNCHECKED and is_python_implementation(spec)
    if checked:
        problem = root_problem(spec, root)
        if problem:
            raise ToolDeniedError(f"tool {tool_id!r} refused: {problem}")
    found = _cache.get(spec)
    if found is None:
        with _lock:  # two threads calling a new tool import its module once
            found = _cache.get(spec)
            if found is None:
                found = _import(spec, tool_id, root if checked else None)
                _cache[spec] = found
    if checked:
        _check_origin(found, spec, tool_id, root)
    return found


def imported(spec: str) -> Any | None:
    """What ``spec`` names if an earlier ``load`` imported it in this process, else None
    (nothing is imported or checked: ``load`` does that)."""
    return _cache.get(spec)


def _check_origin(obj: Any, spec: str, tool_id: str, root: str) -> None:
    """Refuse an object defined outside ``root`` (``pkg.tools:os.system``, or a name
    ``pkg.tools`` imported from ``subprocess``)."""
    origin = getattr(obj, "__module__", None)
    if isinstance(origin, str) and not under_root(origin, root):
        raise ToolDeniedError(
            f"tool {tool_id!r} refused: {spec!r} is defined in {origin!r}, outside the "
            f"toolkit's module {root!r}"
        )


def _import(spec: str, tool_id: str, root: str | None = None) -> Any:
    forward = remote.forwarder(spec)
    if forward is not None:  # an MCP server's tool, a REST operation: started on first call
        return forward(spec, tool_id)
    module_name, _, attr_path = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except BaseException as e:  # an import can raise anything, SystemExit included
        raise ImportFailedError(
            f"cannot import module {module_name!r} for tool {tool_id!r}: {type(e).__name__}: {e}"
            + searched(e)
        ) from e
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise ImportFailedError(
                f"module {module_name!r} has no attribute {attr_path!r} (tool {tool_id!r})"
            ) from e
        if (
            root is not None
            and isinstance(obj, types.ModuleType)
            and not under_root(obj.__name__, root)
        ):
            raise ToolDeniedError(
                f"tool {tool_id!r} refused: {spec!r} reaches module {obj.__name__!r}, "
                f"outside the toolkit's module {root!r}"
            )
    if not callable(obj):
        raise ImportFailedError(
            f"{spec!r} is a {type(obj).__name__}, not something callable (tool {tool_id!r})"
        )
    return obj
