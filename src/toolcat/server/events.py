"""A tool's events over MCP: progress and status as progress notifications, artifacts as
resource content in the result, large ones served back through ``resources/read``.

- ``progress`` and ``status`` events become ``notifications/progress`` when the client's
  request carried a progress token (the SDK sends nothing otherwise), every one before the
  call's result. A status carries the last progress value the tool reported (0 before any;
  never an invented step) with ``state: message`` as the notification's message; progress
  is cut to its total. Log lines stay in the tool's events.
- An artifact up to ``artifacts.INLINE_BYTES`` comes back embedded (``EmbeddedResource``,
  text or base64 blob) under ``toolcat://artifacts/inline/<id>/<name>``; a larger one as a
  ``ResourceLink`` to ``toolcat://artifacts/<call id>/<name>``, whose file is kept 24 hours
  (runtime/artifacts.py). ``resources/read`` serves both back while this server process
  remembers them: per principal, its latest ``MAX_LINKS`` and ``MAX_INLINE_HELD`` bytes of
  embedded content, so one caller's calls never push out another's links. Reading one
  applies the reader's scope to the tool that made it and, under a tokens file, requires the
  principal that made the call: another caller gets "not found", as for an unknown link.
- Names and media types come from the tool: a link's ``name`` is the artifact's safe file
  name (one segment, ``artifacts.safe_name``) and a MIME type without RFC 6838's
  ``type/subtype`` grammar is sent as ``application/octet-stream``.
"""

from __future__ import annotations

import base64
import uuid
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
MAX_LINKS = 1_000  # links kept per principal
MAX_INLINE_HELD = 16 * 1024 * 1024  # small artifacts' content kept in memory per principal
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
    """A served artifact: its file, or the content of a small one, and the tool that made
    it (the reader's scope must reach that tool)."""

    tool: RegisteredTool
    mime_type: str
    path: Path | None = None
    inline: types.TextResourceContents | types.BlobResourceContents | None = None

    @property
    def held(self) -> int:
        """Bytes of content this grant keeps in memory."""
        inline = self.inline
        if inline is None:
            return 0
        return len(inline.text if isinstance(inline, types.TextResourceContents) else inline.blob)


class ArtifactLinks:
    """The artifacts this server handed out, and who may read them back: kept per
    principal (each its latest ``MAX_LINKS``, and at most ``MAX_INLINE_HELD`` bytes of
    small artifacts in memory), so no caller can push another's links out."""

    def __init__(self) -> None:
        self.max_links = MAX_LINKS
        self.max_inline_held = MAX_INLINE_HELD
        self._grants: dict[str | None, OrderedDict[str, Grant]] = {}
        self._held: dict[str | None, int] = {}

    def content(
        self, events: list[ToolEvent], tool: RegisteredTool, principal: str | None
    ) -> list[types.EmbeddedResource | types.ResourceLink]:
        """The result content for a call's artifacts, in the order they were reported."""
        return [self._one(event, tool, principal) for event in events if event.kind == "artifact"]

    def _one(
        self, event: ToolEvent, tool: RegisteredTool, principal: str | None
    ) -> types.EmbeddedResource | types.ResourceLink:
        name = artifacts.safe_name(event.name or "artifact")
        mime = artifacts.media_type(event.mime_type)
        meta = {"toolcat/description": event.message} if event.message else None
        if event.uri is None:  # small: embedded, and served back under its own URI
            uri = f"{PREFIX}inline/{uuid.uuid4().hex}/{quote(name)}"
            contents: types.TextResourceContents | types.BlobResourceContents
            if event.text is not None:
                contents = types.TextResourceContents(uri=uri, mime_type=mime, text=event.text)
            else:
                contents = types.BlobResourceContents(
                    uri=uri, mime_type=mime, blob=event.blob or ""
                )
            self._grant(principal, uri, Grant(tool, mime, inline=contents))
            return types.EmbeddedResource(type="resource", resource=contents, _meta=meta)
        path = Path(unquote(urlparse(event.uri).path))
        uri = f"{PREFIX}{quote(path.parent.name)}/{quote(path.name)}"
        self._grant(principal, uri, Grant(tool, mime, path=path))
        return types.ResourceLink(
            type="resource_link",
            uri=uri,
            name=name,
            description=event.message,
            mime_type=mime,
            size=event.size,
        )

    def _grant(self, principal: str | None, uri: str, grant: Grant) -> None:
        """Remember ``grant`` among ``principal``'s own, the oldest going past the bounds."""
        grants = self._grants.setdefault(principal, OrderedDict())
        held = self._held.get(principal, 0) + grant.held
        old = grants.pop(uri, None)
        if old is not None:
            held -= old.held
        grants[uri] = grant
        while len(grants) > self.max_links or (held > self.max_inline_held and len(grants) > 1):
            _, gone = grants.popitem(last=False)
            held -= gone.held
        self._held[principal] = held

    def read(self, uri: str, scope: Scope, principal: str | None) -> types.ReadResourceResult:
        """The artifact behind a link, for a caller within its scope.

        Raises:
            MCPError: Unknown, not this caller's, outside its scope, or no longer kept.
        """
        grants = self._grants.get(principal)
        grant = grants.get(uri) if grants is not None else None
        if grant is None or scope.refusal(grant.tool):
            raise MCPError(RESOURCE_NOT_FOUND, f"no artifact {uri[:200]!r} for you")
        if grant.inline is not None:
            return types.ReadResourceResult(contents=[grant.inline])
        try:
            content = _read_kept(grant.path)
        except (OSError, ValueError):
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


def _read_kept(path: Path | None) -> bytes:
    """A kept artifact's bytes: a regular file (not a link, FIFO or device), at most the
    artifact limit."""
    from ..files.checks import read_regular

    if path is None:
        raise ValueError("no file")
    return read_regular(path, limit=artifacts.MAX_ARTIFACT_BYTES)
