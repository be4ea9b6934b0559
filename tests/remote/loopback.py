"""Loopback HTTP/1.1 servers on raw sockets, for answers no well-behaved server library
would send (trickled heads, lying lengths, compression bombs): the attack tests' servers."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

Answer = bytes | Callable[[socket.socket], None]


class Loopback:
    """A listening socket on 127.0.0.1 whose connections are each answered on a thread of
    their own (``_answer``), counted in ``connections``."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        raise NotImplementedError


def read_head(conn: socket.socket, data: bytes = b"") -> tuple[bytes, bytes] | None:
    """(a request's head, the bytes after it) read from ``conn`` past ``data``; None when
    the connection ends first."""
    while b"\r\n\r\n" not in data:
        try:
            chunk = conn.recv(65536)
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head, rest


class RawServer(Loopback):
    """One request a connection: records its head and answers ``{}`` (closing), or what
    ``respond`` writes to the connection."""

    def __init__(self, respond: Callable[[socket.socket], None] | None = None) -> None:
        self.respond = respond
        self.heads: list[str] = []
        super().__init__()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            read = read_head(conn)
            if read is None:
                return
            self.heads.append(read[0].decode("latin-1") + "\r\n\r\n")
            with contextlib.suppress(OSError):  # the client stopped reading
                if self.respond is not None:
                    self.respond(conn)
                else:
                    conn.sendall(ok(b"{}", b"Connection: close\r\n"))

    def header(self, name: str) -> list[str]:
        head = self.heads[-1].split("\r\n")[1:]
        return [
            line.split(":", 1)[1].strip()
            for line in head
            if ":" in line and line.split(":", 1)[0].strip().lower() == name.lower()
        ]


class KeepAlive(Loopback):
    """Answers the n-th request (over all connections) with ``answers[n]`` (the last one
    repeated), keeping each connection open for the next request."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.heads: list[bytes] = []
        super().__init__()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while True:
                read = read_head(conn, data)
                if read is None:
                    return
                head, data = read
                self.heads.append(head)
                answer = self.answers[min(len(self.heads) - 1, len(self.answers) - 1)]
                try:
                    answer(conn) if callable(answer) else conn.sendall(answer)
                except OSError:
                    return


def ok(body: bytes, extra: bytes = b"", ctype: bytes = b"application/json") -> bytes:
    """A 200 answer of ``body`` with ``extra`` header lines."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: "
        + ctype
        + b"\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )
