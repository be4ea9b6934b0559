"""One deadline for a whole forwarded exchange: connect, send, status line, headers, redirect
hops and body.

httpx's timeouts bound each network read or write, so an answer trickled a byte at a time,
each byte inside the read timeout, holds a call (and the worker thread it runs on) for as long
as the server likes. Here every read, write, connect and TLS handshake of a pooled client's
connections waits at most until the deadline ``until`` sets for the exchange in progress on
this thread or task (a ``ContextVar``), and past it raises the timeout httpcore raises, which
httpx maps to its own (``httpx.ReadTimeout`` and the like).

Imported with httpx, on the first forwarded call (httpcore is httpx's own dependency).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

log = logging.getLogger(__name__)

WRITE_PIECE = 16 * 1024  # a write waits per piece, so a slow reader is held to the deadline

_deadline: ContextVar[float | None] = ContextVar("toolcat_forward_deadline", default=None)


@contextlib.contextmanager
def until(deadline: float) -> Iterator[None]:
    """Hold every network wait of the exchange inside to ``deadline`` (``time.monotonic()``)."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def left(timeout: float | None, error: type[Exception]) -> float | None:
    """The smaller of ``timeout`` (one wait's) and the time to the exchange's deadline.

    Raises:
        error: The deadline has passed.
    """
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise error("the call's deadline passed")
    return remaining if timeout is None else min(timeout, remaining)


class Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), WRITE_PIECE):
            piece = buffer[start : start + WRITE_PIECE]
            self._inner.write(piece, left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        wait = left(timeout, httpcore.ConnectTimeout)
        return Stream(self._inner.start_tls(ssl_context, server_hostname, wait))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class Backend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        wait = left(timeout, httpcore.ConnectTimeout)
        return Stream(self._inner.connect_tcp(host, port, wait, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        wait = left(timeout, httpcore.ConnectTimeout)
        return Stream(self._inner.connect_unix_socket(path, wait, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, left(timeout, httpcore.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), WRITE_PIECE):
            piece = buffer[start : start + WRITE_PIECE]
            await self._inner.write(piece, left(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        wait = left(timeout, httpcore.ConnectTimeout)
        return AsyncStream(await self._inner.start_tls(ssl_context, server_hostname, wait))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        wait = left(timeout, httpcore.ConnectTimeout)
        stream = await self._inner.connect_tcp(host, port, wait, local_address, socket_options)
        return AsyncStream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        wait = left(timeout, httpcore.ConnectTimeout)
        return AsyncStream(await self._inner.connect_unix_socket(path, wait, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def bounded(pooled: Any) -> Any:
    """``pooled`` (an ``httpx.Client`` or ``AsyncClient``) with every connection pool it sends
    through, proxies' included, connecting through a backend held to ``until``'s deadline.

    httpx 0.28 takes no network backend, so each transport's httpcore pool gets one wrapped
    around its own. An httpx whose clients are built otherwise keeps its per-wait timeouts
    (the caller's wait still ends at the tool's timeout), with a warning logged once: every
    forwarded call failing would be worse than a trickling answer holding a thread.
    """
    try:
        pools = [t._pool for t in [pooled._transport, *pooled._mounts.values()] if t is not None]
        backends = [pool._network_backend for pool in pools]
    except AttributeError:
        _warn_unbounded()
        return pooled
    for pool, inner in zip(pools, backends, strict=True):
        if isinstance(inner, (Backend, AsyncBackend)):
            continue
        if isinstance(inner, httpcore.AsyncNetworkBackend):
            pool._network_backend = AsyncBackend(inner)
        else:
            pool._network_backend = Backend(inner)
    return pooled


@functools.cache
def _warn_unbounded() -> None:
    """Said once a process: this httpx's pools could not be reached."""
    log.warning(
        "httpx %s: a forwarded call's timeout bounds each wait, not the whole exchange",
        httpx.__version__,
    )
