"""How the runtime reaches a tool that lives elsewhere (an MCP server, an HTTP API) without
knowing the clients that talk to it.

An implementation string that starts with a registered prefix (``mcp+stdio:...``,
``openapi+http:...``) is forwarded: the ``Forwarder`` registered for that prefix makes the
callable the runtime then runs like any other. ``toolcat.remote.forwarding`` registers the
MCP and OpenAPI forwarders; the catalog installs them before any call. Such tools always run
in a thread of the calling process (their work is in another process already), so a worker
process never needs them. No module path has a ``+`` in it, so no prefix hides one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Forwarder(Protocol):
    def __call__(self, spec: str, tool_id: str) -> Callable[..., Any]:
        """A callable that forwards its keyword arguments to the tool ``spec`` names."""
        ...


_forwarders: dict[str, Forwarder] = {}
# Why a toolkit of this kind may not call this forwarded implementation (it would send this
# process's environment), or None: ``toolcat.remote.secrets`` installs it with the forwarders.
def _refusal(spec: str, kind: str | None) -> str | None:
    return None



def register(prefix: str, forwarder: Forwarder) -> None:
    """Forward implementations that start with ``prefix`` through ``forwarder``."""
    _forwarders[prefix] = forwarder


def refuse_with(check: Callable[[str, str | None], str | None]) -> None:
    """Ask ``check(spec, toolkit kind)`` before a forwarded implementation is first called."""
    global _refusal
    _refusal = check  # type: ignore[assignment]


def refusal(spec: str, kind: str | None) -> str | None:
    """Why a toolkit of ``kind`` may not call ``spec``, or ``None``."""
    return _refusal(spec, kind) if forwarder(spec) is not None else None


def forwarder(spec: str) -> Forwarder | None:
    """The forwarder for ``spec``; None for a Python implementation (``module:attr``)."""
    return next((f for prefix, f in _forwarders.items() if spec.startswith(prefix)), None)
