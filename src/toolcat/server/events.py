"""A tool's events over MCP: progress and status as progress notifications, artifacts as
resource content in the result, large ones served back through ``resources/read``.

- ``progress`` and ``status`` events become ``notifications/progress`` when the client's
  request carried a progress token (the SDK sends nothing otherwise), every one before the
  call's result. A status carries the last progress value the tool reported (0 before any;
  never an invented step) with ``state: message`` as the notification's message; progress
  is cut to its total. Log lines stay in the tool's events.
- An artifact up to ``artifacts.INLINE_BYTES`` comes back embedded (``EmbeddedResource``,
  text or base64 blob); a larger one as a ``ResourceLink`` to ``toolcat://artifacts/<call
  id>/<name>``, which this server process serves while the file is kept (24 hours,
  runtime/artifacts.py) and it remembers the link (the latest ``MAX_LINKS``). Reading one
  applies the reader's scope to the tool that made it and, under a tokens file, requires the
  principal that made the call: another caller gets "not found", as for an unknown link.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse

import mcp.types as types
from mcp import MCPError

from ..models import RegisteredTool, ToolEvent
from ..runtime import artifacts

if TYPE_CHECKING:
    from .scope import Scope

SCHEME = "toolcat"
PREFIX = f"{SCHEME}://artifacts/"
MAX_LINKS = 10_000
RESOURCE_NOT_FOUND = -32002  # the MCP spec's code for resources/read of an unknown URI


def forward_events(session: Any) -> Callable[[ToolEvent], Awaitable[None]]:
    """Forward a call's progress and status events as MCP progress notifications.

    Only values the tool reported go out: progress never past its total, never backwards (MCP
    progress increases); a status repeats the last progress (0 before any) with its words.
    A failed send raises: the call's delivery (runtime/delivery.py) logs it."""
    last = 0.0
    total: float | None = None

    async def forward(event: ToolEvent) -> None:
        nonlocal last, total
        if event.kind == "progress" and event.progress is not None:
            done = event.progress if event.total is None else min(event.progress, event.total)
            if done < last:
                return
            last, total, message = done, event.total, event.message
        elif event.kind == "status" and event.state:
            message = f"{event.state}: {event.message}" if event.message else event.state
        else:
            return
        await session.report_progress(last, total, message)

    return forward


@dataclass(frozen=True)
class Grant:
    """A served artifact: its file, the tool that made it and the principal who called."""

    path: Path
    tool: RegisteredTool
    principal: str | None
    mime_type: str


class ArtifactLinks:
    """The large artifacts this server handed out as links, and who may read them."""

    def __init__(self) -> None:
        self._grants: OrderedDict[str, Grant] = OrderedDict()

    def content(
        self, events: list[ToolEvent], tool: RegisteredTool, principal: str | None
    ) -> list[types.EmbeddedResource | types.ResourceLink]:
        """The result content for a call's artifacts, in the order they were reported."""
        return [self._one(event, tool, principal) for event in events if event.kind == "artifact"]

    def _one(
        self, event: ToolEvent, tool: RegisteredTool, principal: str | None
    ) -> types.EmbeddedResource | types.ResourceLink:
        name = event.name or "artifact"
        mime = event.mime_type or "application/octet-stream"
        meta = {"toolcat/description": event.message} if event.message else None
        if event.uri is None:  # small: embedded, under a URI that names it (not served)
            uri = f"{PREFIX}inline/{quote(artifacts.safe_name(name))}"
            contents: types.TextResourceContents | types.BlobResourceContents
            if event.text is not None:
                contents = types.TextResourceContents(uri=uri, mime_type=mime, text=event.text)
            else:
                contents = types.BlobResourceContents(
                    uri=uri, mime_type=mime, blob=event.blob or ""
                )
            return types.EmbeddedResource(type="resource", resource=contents, _meta=meta)
        path = Path(unquote(urlparse(event.uri).path))
        uri = f"{PREFIX}{quote(path.parent.name)}/{quote(path.name)}"
        self._grants[uri] = Grant(path, tool, principal, mime)
        self._grants.move_to_end(uri)
        while len(self._grants) > MAX_LINKS:
            self._grants.popitem(last=False)
        return types.ResourceLink(
            type="resource_link",
            uri=uri,
            name=name,
            description=event.message,
            mime_type=mime,
            size=event.size,
        )

    def read(self, uri: str, scope: Scope, principal: str | None) -> types.ReadResourceResult:
        """The artifact behind a link, for a caller within its scope.

        Raises:
            MCPError: Unknown, not this caller's, outside its scope, or no longer kept.
        """
        grant = self._grants.get(uri)
        if grant is None or grant.principal != principal or scope.refusal(grant.tool):
            raise MCPError(RESOURCE_NOT_FOUND, f"no artifact {uri[:200]!r} for you")
        try:
            content = grant.path.read_bytes()
        except OSError:
            raise MCPError(
                RESOURCE_NOT_FOUND, f"artifact {uri[:200]!r} is no longer kept"
            ) from None
        contents: types.TextResourceContents | types.BlobResourceContents
        if grant.mime_type.startswith("text/"):
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                contents = types.TextResourceContents(uri=uri, mime_type=grant.mime_type, text=text)
                return types.ReadResourceResult(contents=[contents])
        blob = base64.b64encode(content).decode("ascii")
        contents = types.BlobResourceContents(uri=uri, mime_type=grant.mime_type, blob=blob)
        return types.ReadResourceResult(contents=[contents])
