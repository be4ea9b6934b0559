"""Loopback binds: which ``--host`` names this machine only, and the ``Host`` names a
request to such a bind may carry (DNS rebinding protection).

One judgement for both: an address that ``serve`` lets through without a token because it
is loopback (``127.0.0.2``, ``LOCALHOST``, ``[::1]``) must get the ``Host`` check too, or a
page from another site, rebound to it, reaches an open server.
"""

from __future__ import annotations

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``); any
    other name could resolve anywhere, and an empty one binds every address."""
    return _own_name(host) is not None


def host_names(host: str) -> tuple[str, ...]:
    """The ``Host`` names (no port, lower case) a request to a server bound to ``host`` may
    carry: the loopback names and the bind's own address; empty (any) for another bind."""
    own = _own_name(host)
    if own is None:
        return ()
    return LOOPBACK_NAMES if own in LOOPBACK_NAMES else (*LOOPBACK_NAMES, own)


def _own_name(host: str) -> str | None:
    """The name a client writes in ``Host`` for a loopback bind ``host``; None if not one."""
    import ipaddress

    if host.lower().rstrip(".") == "localhost":
        return "localhost"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if not address.is_loopback:
        return None
    if address.version == 6:
        return f"[{address.compressed}]"
    return str(address)
