"""A replica URL whose host is an IPv6 address lost its brackets when redacted
(``s3://[::1]:9000/x`` -> ``s3://::1:9000/x``): the follower stores the redacted form as its
state's ``primary``, and reading it back checks that it is already redacted, so the replica
refused its own state file as damaged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolcat.store.replica import check_source, read_state, redacted
from toolcat.store.replica_state import state_path

URLS = [
    "s3://[::1]:9000/x",
    "s3://key:secret@[::1]/x",
    "s3://[fe80::1%25eth0]/x",
    "s3://bucket/path?endpoint=http://u:p@h",
    "abs://account@container/x",
    "s3://bucket/x#?k=secret",
]


@pytest.mark.parametrize("url", URLS)
def test_redacting_twice_changes_nothing_and_keeps_no_secret(url: str) -> None:
    check_source(url)  # accepted, so a follower would store its redacted form
    shown = redacted(url)
    assert redacted(shown) == shown
    assert "secret" not in shown and "u:p" not in shown and "account" not in shown


def test_a_follower_reads_back_the_state_it_wrote_for_an_ipv6_host(tmp_path: Path) -> None:
    db = tmp_path / "replica.db"
    db.touch()
    state = state_path(db)
    state.write_text(json.dumps({"primary": redacted("s3://[::1]:9000/x"), "txid": 3}))
    state.chmod(0o600)
    found = read_state(db)
    assert found is not None and found["primary"] == "s3://[::1]:9000/x"
