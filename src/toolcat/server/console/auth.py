"""Who is looking at the console, and whether a form was posted by the console itself.

A browser cannot send a bearer header when it follows a link, so a principal presents its
token once, in the login form (``POST /ui/login``, never in a URL), and gets a session cookie
(``HttpOnly``, ``SameSite=Strict``, ``Path=/ui``, ``Secure`` over HTTPS) holding its name, an
expiry and an HMAC of both keyed by its own token: any server holding the same tokens file
(replicas behind a balancer) accepts it, and changing the token revokes it.

``toolcat ui`` (a local file, loopback) has no tokens: it prints a one-time URL secret that
the first visit exchanges for a cookie signed by a key of this process (as Jupyter does); the
secret is spent on use. ``serve --http`` without tokens has no login: every visitor is the
server's scope, read-only.

Admin forms carry a CSRF token (an HMAC of the session cookie under the same key) and must
come with an ``Origin`` naming the host the request was sent to.
"""

from __future__ import annotations

import base64
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..scope import Scope
from ..tokens import Principal, Tokens

COOKIE = "toolcat_console"
SESSION_SECONDS = 8 * 3600
MAX_COOKIE = 512  # longer cookies are not ours
LOCAL = Principal("local", Scope(name="local"), admin=True)
OPEN = Principal("anonymous", Scope(name="anonymous"))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Sessions:
    """Logs principals in and recognises their cookies.

    Exactly one of ``tokens`` (``serve --http --tokens/--token``) and ``local_secret``
    (``toolcat ui``) is set, or neither (``serve --http`` without tokens: no login)."""

    tokens: Tokens | None = None
    local_secret: str | None = None

    def __post_init__(self) -> None:
        self._key = secrets.token_bytes(32)  # toolcat ui's cookies: this process only
        self._spent = threading.Lock()

    @property
    def open(self) -> bool:
        """No login at all: ``serve --http`` without tokens."""
        return self.tokens is None and self.local_secret is None

    def _sign(self, name: str, message: bytes) -> bytes | None:
        if self.tokens is not None:
            return self.tokens.sign(name, message)
        return hmac.new(self._key, message, "sha256").digest() if name == LOCAL.name else None

    def _principal(self, name: str) -> Principal | None:
        if self.tokens is not None:
            return self.tokens.named(name)
        return LOCAL if name == LOCAL.name else None

    def login_token(self, token: str) -> Principal | None:
        """The principal a token typed into the login form names, or None."""
        if self.tokens is None or not token or len(token) > 4096:
            return None
        return self.tokens.principal(b"Bearer " + token.encode("utf-8", "replace"))

    def login_secret(self, secret: str) -> Principal | None:
        """``toolcat ui``'s one-time secret: the first right one logs in, then it is spent."""
        with self._spent:
            expected = self.local_secret
            if (
                not expected
                or not secret
                or not hmac.compare_digest(secret.encode("utf-8", "replace"), expected.encode())
            ):
                return None
            self.local_secret = ""  # spent: not None, so the console still wants a login
            return LOCAL

    def cookie(self, principal: Principal) -> str:
        payload = f"{principal.name}\n{int(time.time()) + SESSION_SECONDS}".encode()
        mac = self._sign(principal.name, payload)
        assert mac is not None
        return f"{_b64(payload)}.{_b64(mac)}"

    def principal(self, cookie: str | None) -> Principal | None:
        """The principal a session cookie names, if it is ours, unexpired and its token
        unchanged; the open console's visitor when there is no login."""
        if self.open:
            return OPEN
        if not cookie or len(cookie) > MAX_COOKIE or cookie.count(".") != 1:
            return None
        try:
            payload_text, mac_text = cookie.split(".")
            payload, mac = _unb64(payload_text), _unb64(mac_text)
            name, expiry = payload.decode().split("\n")
            expires = int(expiry)
        except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
            return None
        expected = self._sign(name, payload)
        if expected is None or not hmac.compare_digest(mac, expected) or expires < time.time():
            return None
        return self._principal(name)

    def csrf(self, cookie: str | None) -> str:
        """The CSRF token of a session (empty for the open console, which has no forms)."""
        if not cookie or self.open:
            return ""
        principal = self.principal(cookie)
        if principal is None:
            return ""
        mac = self._sign(principal.name, b"csrf\n" + cookie.encode())
        return _b64(mac or b"")

    def form_ok(self, cookie: str | None, given: str, origin: str | None, host: str) -> bool:
        """A POST came from the console's own page: right CSRF token, and an ``Origin``
        naming the host it was sent to."""
        expected = self.csrf(cookie)
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            return False
        return same_origin(origin, host)


def same_origin(origin: str | None, host: str) -> bool:
    """Whether a request's ``Origin`` header names the ``Host`` it was sent to."""
    if not origin or not host:
        return False
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()
