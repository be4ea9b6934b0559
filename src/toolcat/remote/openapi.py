"""Forwarding calls to REST operations imported from an OpenAPI document.

A tool imported with ``register --openapi`` has an implementation of the form
``openapi+http:BASE_URL#PLAN``, where ``PLAN`` is compact JSON saying how the tool's arguments
become an HTTP request (see ``Operation``)::

    {"method": "GET", "path": "/movie/{movie_id}",
     "args": {"movie_id": ["path", "movie_id"], "language": ["query", "language"],
              "name": ["body", "name"], "body": ["body", ""]},
     "headers": {"Authorization": "Bearer ${TMDB_TOKEN}"}, "timeout": 30}

``args`` maps each argument to its location (``path``, ``query``, ``header``, ``cookie``,
``body``) and its name there; ``["body", ""]`` is the whole request body. ``headers`` are sent
with every call; ``${NAME}`` references in them are resolved from the environment of the process
making the call (``toolcat.remote.credentials``), so the catalog stores the reference, never
the secret. A header the HTTP layer or the admin owns is never set from a caller's argument
(``owned_header``): not at import, not at call time.

An answer is streamed and read only up to the bound its result is cut to
(``toolcat.runtime.results.result_bytes``), decoded here within that bound (``BodyReader``),
so an API cannot grow the process by answering more or by compressing it. The whole exchange
ends at the operation's timeout (``_deadline``), and no cookie an answer sets is kept
(``NoCookies``).

httpx is imported on the first call. One pooled ``httpx.Client`` per base URL serves the
synchronous calls (the runtime runs them on its worker threads), one ``httpx.AsyncClient`` per
base URL and event loop the ``acall`` coroutine of the forwarder.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import http.cookiejar
import json
import re
import threading
import time
import unicodedata
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ..errors import ImportFailedError, InvalidArgumentsError, ToolcatError, ToolTimeoutError
from ..runtime import tracing
from ..runtime.results import CutText, result_bytes
from .credentials import header_value_problem, redacted, resolve_headers, secret_values
from .schemes import OPENAPI_PREFIX

PREFIX = OPENAPI_PREFIX
DEFAULT_TIMEOUT = 30.0
EXCERPT_CHARS = 500
LOCATIONS = ("path", "query", "header", "cookie", "body")
MAX_REDIRECTS = 5
MAX_DECODES = 8  # percent-decoding passes before a value counts as hostile
DEFAULT_PORTS = {"http": 80, "https": 443}
ERROR_BODY_BYTES = 64 * 1024  # read of an error answer: its excerpt is EXCERPT_CHARS
COMPRESSED_SLACK = 4096  # compressed bytes read past the bound (and 1/16 of it): framing only
# Headers the HTTP layer sets (framing, connection, content negotiation) or that carry a
# credential: never taken from a caller's argument, whatever an OpenAPI document declares (the
# specification itself says Accept, Content-Type and Authorization parameters SHALL be ignored).
OWNED_HEADERS = frozenset(
    {
        "host",
        "authorization",
        "proxy-authorization",
        "cookie",
        "content-length",
        "content-type",
        "content-encoding",
        "accept",
        "accept-encoding",
        "transfer-encoding",
        "connection",
        "proxy-connection",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "expect",
        # What the request does, as servers honour them: a method override would let a caller
        # turn a GET tool (annotated read-only, which a policy may allow) into a DELETE;
        # ``Proxy`` sets a CGI app's outbound proxy (httpoxy).
        "x-http-method-override",
        "x-http-method",
        "x-method-override",
        "proxy",
    }
)
INSTALL_HINT = "install the OpenAPI extra: pip install 'toolcat[openapi]'"


class HTTPToolError(ToolcatError):
    """The API answered a call with a status outside 2xx or in a content coding not read, or
    could not be reached; the message carries the status and an excerpt of the body, for the
    model to read (``status``: the status outside 2xx, else ``None``)."""

    code = "TOOL_ERROR"

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class Operation:
    """How one tool's arguments become one HTTP request.

    Attributes:
        base_url: The server URL the path is appended to.
        method: The HTTP method, upper case.
        path: The path template (``/movie/{movie_id}``).
        args: Argument name → (location, name there); location ``body`` with name ``""`` is
            the whole body.
        headers: Headers sent with every call (values may hold ``${NAME}`` references).
        timeout: Seconds the request may take (httpx connect/read/write/pool).
        body: ``json`` or ``form``: how the body is encoded.
        joined: Arguments whose array value is sent as one comma-separated value
            (``explode: false``).
    """

    base_url: str
    method: str
    path: str
    args: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    body: str = "json"
    joined: tuple[str, ...] = ()

    def implementation(self) -> str:
        plan: dict[str, Any] = {
            "method": self.method,
            "path": self.path,
            "args": {k: list(v) for k, v in self.args.items()},
        }
        if self.headers:
            plan["headers"] = dict(self.headers)
        plan["timeout"] = self.timeout
        if self.body != "json":
            plan["body"] = self.body
        if self.joined:
            plan["joined"] = list(self.joined)
        text = json.dumps(plan, separators=(",", ":"), ensure_ascii=False)
        return f"{PREFIX}{self.base_url.rstrip('/')}#{text}"

    def __str__(self) -> str:
        return f"{self.method} {self.base_url.rstrip('/')}{self.path}"


def _header_key(name: str) -> str:
    """A header name as servers may read it: NFKC, stripped, case-folded, ``_`` as ``-``
    (CGI and WSGI servers read ``X_Key`` and ``X-Key`` alike, as ``HTTP_X_KEY``)."""
    return unicodedata.normalize("NFKC", name).strip().casefold().replace("_", "-")


def owned_header(location: str, name: str, admin_headers: Iterable[str]) -> str | None:
    """The header a caller's value for the parameter ``name`` in ``location`` would set that
    is not the caller's to set, or ``None``: one the HTTP layer or a credential owns
    (``OWNED_HEADERS``), or one the admin gave (``--header``); a ``cookie`` parameter writes
    the ``Cookie`` header, the admin's when the admin gave one. Names compare as a server may
    read them (``_header_key``: NFKC, stripped, any case, ``_`` as ``-``). The one rule for
    import (such parameters are left out) and for calls (a stored plan is input too:
    refused)."""
    admin = {_header_key(h) for h in admin_headers}
    if location == "header":
        key = _header_key(name)
        return name.strip() if key in OWNED_HEADERS or key in admin else None
    if location == "cookie" and "cookie" in admin:
        return "Cookie"
    return None


def is_openapi(spec: str) -> bool:
    return spec.startswith(PREFIX)


def parse_implementation(spec: str) -> Operation:
    """The ``Operation`` an ``openapi+http:BASE#PLAN`` implementation string describes.

    Raises:
        ImportFailedError: The string is not of that form.
    """
    base, sep, text = spec[len(PREFIX) :].partition("#")
    try:
        if not spec.startswith(PREFIX) or not sep or not base:
            raise ValueError("expected 'openapi+http:BASE_URL#{...}'")
        plan = json.loads(text)
        args = {str(k): (str(v[0]), str(v[1])) for k, v in plan.get("args", {}).items()}
        for name, (location, _) in args.items():
            if location not in LOCATIONS:
                raise ValueError(f"argument {name!r} has unknown location {location!r}")
        return Operation(
            base_url=base,
            method=str(plan["method"]).upper(),
            path=str(plan["path"]),
            args=args,
            headers={str(k): str(v) for k, v in (plan.get("headers") or {}).items()},
            timeout=float(plan.get("timeout", DEFAULT_TIMEOUT)),
            body=str(plan.get("body", "json")),
            joined=tuple(plan.get("joined", ())),
        )
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise ImportFailedError(f"{spec[:120]!r} is not an OpenAPI implementation: {e}") from e


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


@dataclass
class Request:
    """One HTTP request, ready for httpx."""

    method: str
    url: str
    params: list[tuple[str, str]]
    headers: dict[str, str]
    json_body: Any = None
    form_body: dict[str, str] | None = None
    has_body: bool = False
    secrets: tuple[str, ...] = ()  # what no error may show (``credentials.secret_values``)


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the port made explicit: what "same origin" compares."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:  # a port that is no number
        port = -1
    host = (parts.hostname or "").lower()
    with contextlib.suppress(UnicodeError):  # as httpx sends a non-ASCII host
        host = host.encode("idna").decode("ascii")
    return scheme, host, port


def has_dot_segment(text: str) -> bool:
    """Whether ``text`` holds a ``.`` or ``..`` segment (``/`` and ``\\`` separate segments)
    once percent-decoding (repeated: ``%252e``) and Unicode normalisation (NFKC: ``．``,
    ``‥``) are undone, as a server or proxy may before it routes."""
    decoded = text
    for _ in range(MAX_DECODES):
        if "%" not in decoded or unquote(decoded) == decoded:
            break
        decoded = unquote(decoded)
    else:
        return True  # encoded deeper than any honest value: refused like a dot segment
    return any(
        part.strip() in (".", "..")
        for form in (text, decoded, unicodedata.normalize("NFKC", decoded))
        for part in re.split(r"[/\\]", form)
    )


def path_segment(argument: str, value: str) -> str:
    """``value`` percent-encoded as exactly one path segment.

    Raises:
        InvalidArgumentsError: ``value`` is empty or holds a dot segment (``has_dot_segment``),
            which would move the request off its path.
    """
    if not value:
        raise InvalidArgumentsError(f"path parameter {argument!r} may not be empty")
    if has_dot_segment(value):
        raise InvalidArgumentsError(
            f"path parameter {argument!r} may not be or hold a dot segment ('.' or '..'): "
            "it would move the request off its path"
        )
    return quote(value, safe="")


def template_pattern(base_url: str, template: str) -> re.Pattern[str]:
    """The raw paths ``template`` may become under ``base_url``: its literal parts as they
    are, each ``{parameter}`` one non-empty segment."""
    base_path = urlsplit(base_url).path.rstrip("/")
    if template and not template.startswith("/"):  # "x/{id}" under /api would be /apix/...
        return re.compile(r"(?!)")
    parts = re.split(r"\{[^{}]+\}", template)
    return re.compile(re.escape(base_path) + "[^/?#]+".join(re.escape(p) for p in parts))


def check_url(operation: Operation, url: str) -> None:
    """Refuse to send a request whose URL, as the HTTP library will send it (dot segments
    resolved), is not on the operation's origin and path template under its base URL, or
    holds a dot segment in any spelling.

    Raises:
        InvalidArgumentsError: The URL left its origin or its path.
    """
    import httpx

    try:
        sent = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise InvalidArgumentsError(f"refused to send {operation}: not a valid URL ({e})") from None
    raw_path = sent.raw_path.decode("ascii").split("?", 1)[0]
    same_origin = origin(str(sent)) == origin(operation.base_url)
    pattern = template_pattern(operation.base_url, operation.path)
    if not same_origin or not pattern.fullmatch(raw_path) or has_dot_segment(raw_path):
        raise InvalidArgumentsError(
            f"refused to send {operation.method} {sent.scheme}://{sent.netloc.decode()}"
            f"{raw_path}: the request must stay on {operation}"
        )


def build_request(
    operation: Operation, arguments: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> Request:
    """The request for a call with ``arguments`` (already validated against the schema).

    Each path parameter becomes one percent-encoded segment (``path_segment``).

    Raises:
        MissingSecretError: A header references an environment variable that is not set.
        UnsendableHeaderError: A configured header's value cannot be sent (names the header).
        InvalidArgumentsError: A path parameter is empty or a dot segment; a header argument
            cannot be sent, or would set a header the caller may not (``owned_header``).
    """
    path = operation.path
    params: list[tuple[str, str]] = []
    headers = resolve_headers(operation.headers, where=str(operation), environ=environ)
    secrets = tuple(secret_values(operation.headers, headers, environ))
    cookies: list[str] = []
    body: dict[str, Any] = {}
    whole_body: Any = None
    has_body = False
    for arg, value in arguments.items():
        location, name = operation.args.get(arg, ("query", arg))
        if value is None and location != "body":
            continue
        taken = owned_header(location, name, operation.headers)
        if taken:
            raise InvalidArgumentsError(
                f"{operation}: argument {arg!r} would set the header {taken!r}, which the "
                "HTTP layer or the admin sets"
            )
        if isinstance(value, list) and arg in operation.joined:
            value = ",".join(_text(v) for v in value)
        if location == "path":
            path = path.replace("{" + name + "}", path_segment(arg, _text(value)))
        elif location == "query":
            values = value if isinstance(value, list) else [value]
            params.extend((name, _text(v)) for v in values)
        elif location == "header":
            text = _text(value)
            reason = header_value_problem(text)
            if reason:
                raise InvalidArgumentsError(f"argument {arg!r} (header {name!r}): {reason}")
            headers[name] = text
        elif location == "cookie":
            cookies.append(f"{name}={quote(_text(value), safe='')}")
        elif name:
            body[name] = value
            has_body = True
        else:
            whole_body, has_body = value, True
    if cookies:
        headers["Cookie"] = "; ".join(cookies)
    tracing.inject(headers)  # one trace across the gateway (OpenTelemetry, when loaded)
    if whole_body is not None and body and isinstance(whole_body, dict):
        whole_body = {**whole_body, **body}
    elif whole_body is None and body:
        whole_body = body
    request = Request(
        method=operation.method,
        url=operation.base_url.rstrip("/") + path,
        params=params,
        headers=headers,
        has_body=has_body,
        secrets=secrets,
    )
    if has_body:
        if operation.body == "form" and isinstance(whole_body, dict):
            request.form_body = {k: _text(v) for k, v in whole_body.items()}
        else:
            request.json_body = whole_body
    return request


def body_bound(response: Any, limit: int) -> int:
    """How many bytes of ``response``'s body are worth reading: ``limit`` (what the result is
    cut to) of a 2xx answer, ``ERROR_BODY_BYTES`` at most of another (only an excerpt is
    shown)."""
    return limit if 200 <= response.status_code < 300 else min(limit, ERROR_BODY_BYTES)


def _timed_out(operation: Operation) -> ToolTimeoutError:
    return ToolTimeoutError(
        f"{operation} did not answer within {operation.timeout:g} s (the whole exchange)"
    )


def content_codings(response: Any) -> list[str]:
    """The content codings ``response`` says its body is in, outermost last (``identity``
    left out)."""
    codings = (
        coding.strip().lower()
        for value in response.headers.get_list("content-encoding")
        for coding in value.split(",")
    )
    return [c for c in codings if c and c != "identity"]


class BodyReader:
    """The body of one answer decoded from its wire bytes (``iter_raw``) within ``body_bound``:
    the one decoder of the synchronous and the asynchronous paths.

    Forwarded requests ask for ``Accept-Encoding: identity``; an API may still compress. One
    ``gzip``, ``x-gzip`` or ``deflate`` layer is inflated here by zlib with ``max_length``, so
    no more than the bound and one byte of decoded answer ever exist (httpx would inflate a
    whole network read first: a gzip of a gzip is a millionfold), and the compressed bytes
    read are bounded too (``COMPRESSED_SLACK``). Any other coding (``br``, ``zstd``, layers
    stacked, a name nobody knows) is refused before the body is read.

    Raises:
        HTTPToolError: The answer is in a coding not read, or its compressed body is damaged
            (one line: the operation, the status and the coding, never the body).
    """

    def __init__(self, response: Any, operation: Operation, limit: int) -> None:
        self.response = response
        self.operation = operation
        self.bound = body_bound(response, limit)
        self.codings = content_codings(response)
        if self.codings and self.codings not in (["gzip"], ["x-gzip"], ["deflate"]):
            raise self._refused(
                "which is not read: toolcat asks for identity and decodes one gzip or deflate layer"
            )
        self.inflater: Any = None  # the stream (a gzip member) being inflated
        self.pending = b""  # the first bytes of the next stream, until it can be told apart
        self.streams = 0  # streams started (gzip allows several members, one after another)
        self.raw_bound = self.bound + self.bound // 16 + COMPRESSED_SLACK
        self.raw = 0
        self.parts: list[bytes] = []
        self.size = 0
        self.cut = False  # more answer than the bound
        self.ended = False  # the compressed body ended: what follows is read, not kept

    def _refused(self, why: str) -> HTTPToolError:
        status = self.response.status_code
        coding = ascii(", ".join(self.codings)[:64])
        return HTTPToolError(
            f"{self.operation} answered {status} in Content-Encoding {coding}, {why}",
            None if 200 <= status < 300 else status,
        )

    def _keep(self, data: bytes) -> None:
        room = self.bound + 1 - self.size
        if len(data) >= room:
            data, self.cut = data[:room], True
        self.parts.append(data)
        self.size += len(data)

    def _start(self, head: bytes) -> Any:
        """The decompressor for a stream beginning with ``head`` (two bytes at least), or None:
        after a gzip member, bytes that do not begin another are not the body."""
        if self.codings == ["deflate"]:  # zlib-wrapped, as RFC 9110 says, else raw deflate
            wrapped = head[0] & 0x0F == 8 and ((head[0] << 8) | head[1]) % 31 == 0
            return zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        if head[:2] == b"\x1f\x8b":
            return zlib.decompressobj(zlib.MAX_WBITS | 16)
        if not self.streams:
            raise self._refused("which is damaged")
        return None

    def _inflate(self, data: bytes) -> None:
        while data and not self.cut and not self.ended:
            if self.inflater is None:  # a stream's first bytes: wait for two to tell it
                data, self.pending = self.pending + data, b""
                if len(data) < 2:
                    self.pending = data
                    return
                self.inflater = self._start(data)
                if self.inflater is None:
                    self.ended = True
                    return
                self.streams += 1
            try:
                out = self.inflater.decompress(data, self.bound + 1 - self.size)
            except zlib.error:
                raise self._refused("which is damaged") from None
            self._keep(out)
            if self.inflater.eof:
                data, self.inflater = self.inflater.unused_data, None
                self.ended = self.codings == ["deflate"]  # one stream; gzip may have more
            else:
                data = self.inflater.unconsumed_tail

    def feed(self, data: bytes) -> bool:
        """Take the next bytes off the wire; whether reading should stop: the bound is passed,
        or more compressed bytes came than a body within it needs (bytes after a compressed
        body are read to the message's end, so its connection is pooled, but not kept)."""
        self.raw += len(data)
        if not self.codings:
            self._keep(data)
            return self.cut
        self._inflate(data)
        if self.raw > self.raw_bound and not self.ended:
            self.cut = True
        return self.cut or self.raw > self.raw_bound

    def body(self) -> tuple[bytes, bool]:
        """The body as read (the bound and one byte at most when cut), and whether it was.

        Raises:
            HTTPToolError: The compressed body stopped inside a stream (damaged).
        """
        if not self.cut and (self.inflater is not None or (self.pending and not self.streams)):
            raise self._refused("which is damaged")  # a byte after a gzip member is not
        return b"".join(self.parts), self.cut


def read_body(
    response: Any, operation: Operation, limit: int, deadline: float
) -> tuple[bytes, bool]:
    """The body of a streamed ``response``, decoded and read up to ``body_bound`` bytes and one
    more (``BodyReader``), and whether there was more: then reading stops and the rest is
    never read.

    Raises:
        ToolTimeoutError: The answer is still coming at ``deadline`` (``time.monotonic()``).
        HTTPToolError: The answer is in a content coding not read, or damaged.
    """
    reader = BodyReader(response, operation, limit)
    for chunk in response.iter_raw():
        if reader.feed(chunk):
            break
        if time.monotonic() > deadline:
            raise _timed_out(operation)
    return reader.body()


async def aread_body(
    response: Any, operation: Operation, limit: int, deadline: float
) -> tuple[bytes, bool]:
    """``read_body`` for an ``httpx.AsyncClient``'s response."""
    reader = BodyReader(response, operation, limit)
    async for chunk in response.aiter_raw():
        if reader.feed(chunk):
            break
        if time.monotonic() > deadline:
            raise _timed_out(operation)
    return reader.body()


def _decoded(response: Any, content: bytes) -> str:
    """``content`` as text, as httpx decodes a body (its charset, else UTF-8; bad bytes
    replaced)."""
    try:
        return content.decode(response.charset_encoding or "utf-8", errors="replace")
    except (LookupError, UnicodeError):  # a charset Python does not know, or cannot replace in
        return content.decode("utf-8", errors="replace")


def result_of(
    response: Any,
    operation: Operation,
    secrets: Iterable[str] = (),
    *,
    body: bytes | None = None,
    cut: bool = False,
) -> Any:
    """The value of an httpx response: JSON when it says so (or parses), else text.

    Args:
        response: The response.
        operation: The operation it answers.
        secrets: Values no error may show.
        body: The body as read (``read_body``); default: the response's whole content.
        cut: Whether ``body`` is only the start of the answer: then it is text
            (``CutText``), which the result is cut from and marked truncated.

    Raises:
        HTTPToolError: The status is not 2xx (message: status, reason and a body excerpt, with
            ``secrets`` an API may echo, such as a refused token, shown as ``***``).
    """
    content = response.content if body is None else body
    status = response.status_code
    if not 200 <= status < 300:
        text = " ".join(_decoded(response, content).split())
        excerpt = redacted(text, secrets)[:EXCERPT_CHARS]
        reason = response.reason_phrase or ""
        raise HTTPToolError(
            f"{operation.method} {response.request.url.path} answered {status} {reason}".rstrip()
            + (f": {excerpt}" if excerpt else " (empty body)"),
            status,
        )
    if status == 204 or not content:
        return None
    if cut:  # only the start was read: no JSON to parse, as the whole would have been cut
        return CutText(_decoded(response, content))
    if "json" in response.headers.get("content-type", ""):
        try:
            return json.loads(content)
        except ValueError:
            pass
    return _decoded(response, content)


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as e:
        raise ImportFailedError(f"httpx is not installed; {INSTALL_HINT}") from e
    return httpx


class NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that keeps nothing. The pooled clients are shared by every caller of a
    base URL, so a cookie one answer sets (``Set-Cookie``) would go with everyone's later
    calls; only a call's own cookie parameters and the admin's ``Cookie`` header are sent."""

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


_clients: dict[str, Any] = {}
_async_clients: dict[tuple[str, int], Any] = {}
_lock = threading.Lock()


def client(base_url: str) -> Any:
    """The pooled ``httpx.Client`` for ``base_url`` (one per process): it keeps no cookies
    (``NoCookies``) and its every network wait ends at the exchange's deadline
    (``_deadline.bounded``)."""
    with _lock:
        found = _clients.get(base_url)
        if found is None:
            httpx = _httpx()
            from . import _deadline

            found = httpx.Client(follow_redirects=False, cookies=NoCookies())
            found = _clients[base_url] = _deadline.bounded(found)
            if len(_clients) == 1:
                atexit.register(close_all)
        return found


def async_client(base_url: str) -> Any:
    """The pooled ``httpx.AsyncClient`` for ``base_url`` on the running event loop."""
    key = (base_url, id(asyncio.get_running_loop()))
    with _lock:
        found = _async_clients.get(key)
        if found is None:
            from . import _deadline

            found = _httpx().AsyncClient(follow_redirects=False, cookies=NoCookies())
            found = _async_clients[key] = _deadline.bounded(found)
        return found


def close_all() -> None:
    """Close the synchronous clients (the async ones close with their loops)."""
    with _lock:
        found = list(_clients.values())
        _clients.clear()
        _async_clients.clear()
    for c in found:
        c.close()


def _send_kwargs(request: Request, timeout: float) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "params": request.params,
        "headers": request.headers,
        "timeout": timeout,
    }
    if request.form_body is not None:
        kwargs["data"] = request.form_body
    elif request.has_body:
        kwargs["json"] = request.json_body
    return kwargs


def _failure(error: Exception, operation: Operation, request: Request) -> ToolcatError:
    httpx = _httpx()
    if isinstance(error, httpx.TimeoutException):
        return ToolTimeoutError(
            f"{operation} did not answer within {operation.timeout:g} s ({type(error).__name__})"
        )
    text = redacted(f"{type(error).__name__}: {error}", request.secrets)
    return HTTPToolError(f"cannot reach {operation}: {text}")


def next_hop(response: Any, operation: Operation) -> Any:
    """The request a redirect ``response`` asks for, if it may be followed: only to the
    operation's own origin (scheme, host and port), where the configured headers are meant
    to go. ``None`` when ``response`` is no redirect.

    Raises:
        HTTPToolError: The redirect leads to another origin (not followed: the headers,
            credentials included, would go with it).
    """
    if not response.has_redirect_location or response.next_request is None:
        return None
    target = response.next_request
    if origin(str(target.url)) != origin(operation.base_url):
        raise HTTPToolError(
            f"{operation.method} {response.request.url.path} answered {response.status_code} "
            f"redirecting to another origin ({target.url.scheme}://{target.url.netloc.decode()});"
            " not followed: the configured headers would go with it",
            response.status_code,
        )
    # httpx leaves a hop's cookies to its jar, which keeps none here (``NoCookies``): the
    # request's own Cookie header (the admin's, the call's cookie parameters) goes on, to
    # the same origin only.
    cookie = response.request.headers.get("cookie")
    if cookie is not None and "cookie" not in target.headers:
        target.headers["Cookie"] = cookie
    return target


def _outgoing(
    operation: Operation, arguments: Mapping[str, Any], pooled: Any
) -> tuple[Request, Any]:
    """The request for ``arguments`` and the httpx request built from it on ``pooled`` (a
    ``Client`` or an ``AsyncClient``), its URL checked before and after httpx read it."""
    request = build_request(operation, arguments)
    check_url(operation, request.url)
    outgoing = pooled.build_request(
        request.method, request.url, **_send_kwargs(request, operation.timeout)
    )
    check_url(operation, str(outgoing.url))
    return request, outgoing


def _ready(outgoing: Any, operation: Operation, deadline: float) -> Any:
    """``outgoing`` (the first request or a redirect hop) as it is sent: asking for the body
    as it is (``BodyReader`` decodes what comes anyway), and waiting for a pooled connection
    no longer than the time left to ``deadline``."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _timed_out(operation)
    outgoing.headers["Accept-Encoding"] = "identity"
    outgoing.extensions["timeout"] = _httpx().Timeout(min(operation.timeout, left)).as_dict()
    return outgoing


def _too_many(operation: Operation) -> HTTPToolError:
    return HTTPToolError(f"{operation} redirected more than {MAX_REDIRECTS} times")


def call(operation: Operation, arguments: Mapping[str, Any]) -> Any:
    """Send the request for ``arguments`` and return the response's value. Redirects are
    followed only within the operation's origin (``next_hop``).

    The answer is streamed and read up to the bound the call's result is cut to
    (``result_bytes``), decoded as it is read (``BodyReader``); a longer one is cut there,
    its connection closed unread. The whole exchange (connect, send, status line and headers,
    redirect hops, body) ends at the operation's timeout (``_deadline``).

    Raises:
        HTTPToolError: A non-2xx answer, a redirect to another origin, or the server cannot
            be reached.
        HTTPToolError: The answer is in a content coding not read, or damaged.
        ToolTimeoutError: The exchange is not over within the operation's timeout.
        MissingSecretError: A header references an unset environment variable.
        InvalidArgumentsError: The arguments would move the request off its path, or set a
            header that is not the caller's.
    """
    httpx = _httpx()
    from . import _deadline

    deadline = time.monotonic() + operation.timeout
    limit = result_bytes()
    pooled = client(operation.base_url)
    request, outgoing = _outgoing(operation, arguments, pooled)
    try:
        with _deadline.until(deadline):
            response = pooled.send(_ready(outgoing, operation, deadline), stream=True)
            try:
                for _ in range(MAX_REDIRECTS + 1):
                    hop = next_hop(response, operation)
                    if hop is None:
                        body, cut = read_body(response, operation, limit, deadline)
                        return result_of(response, operation, request.secrets, body=body, cut=cut)
                    response.close()
                    response = pooled.send(_ready(hop, operation, deadline), stream=True)
            finally:
                response.close()
    except httpx.HTTPError as e:
        raise _failure(e, operation, request) from e
    raise _too_many(operation)


async def acall(operation: Operation, arguments: Mapping[str, Any]) -> Any:
    """``call`` for async code, on a pooled ``httpx.AsyncClient``."""
    httpx = _httpx()
    from . import _deadline

    deadline = time.monotonic() + operation.timeout
    limit = result_bytes()
    pooled = async_client(operation.base_url)
    request, outgoing = _outgoing(operation, arguments, pooled)
    try:
        with _deadline.until(deadline):
            response = await pooled.send(_ready(outgoing, operation, deadline), stream=True)
            try:
                for _ in range(MAX_REDIRECTS + 1):
                    hop = next_hop(response, operation)
                    if hop is None:
                        body, cut = await aread_body(response, operation, limit, deadline)
                        return result_of(response, operation, request.secrets, body=body, cut=cut)
                    await response.aclose()
                    response = await pooled.send(_ready(hop, operation, deadline), stream=True)
            finally:
                await response.aclose()
    except httpx.HTTPError as e:
        raise _failure(e, operation, request) from e
    raise _too_many(operation)


def operation_tool(spec: str) -> Any:
    """A callable that sends its keyword arguments as the request ``spec`` describes; its
    ``acall`` attribute is the same as a coroutine function. Nothing is connected here."""
    operation = parse_implementation(spec)
    _httpx()  # a missing extra is an import failure now, not on every call

    def forward(**arguments: Any) -> Any:
        return call(operation, arguments)

    async def forward_async(**arguments: Any) -> Any:
        return await acall(operation, arguments)

    forward.__name__ = forward_async.__name__ = f"{operation.method} {operation.path}"
    forward.acall = forward_async  # type: ignore[attr-defined]
    forward.operation = operation  # type: ignore[attr-defined]
    return forward
