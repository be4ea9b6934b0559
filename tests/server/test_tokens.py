"""Tokens files: principals and their scopes, and one-line errors naming the line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.clients import server_env
from toolcat.server.tokens import Tokens, TokensFileError, load_tokens


def test_yaml_and_toml_principals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_TOKEN", "from-the-env-1")
    yaml_file = tmp_path / "tokens.yaml"
    yaml_file.write_text(
        "principals:\n  - name: a\n    token: ${TEAM_TOKEN}\n    toolkits: [math]\n"
    )
    toml_file = tmp_path / "tokens.toml"
    toml_file.write_text('[[principals]]\nname = "b"\ntoken = "toml-token-2"\ntags = ["x"]\n')
    a = load_tokens(yaml_file).principal(b"Bearer from-the-env-1")
    assert a is not None and a.name == "a" and a.scope.toolkits == ("math",)
    assert load_tokens(yaml_file).principal(b"bEaReR from-the-env-1") is not None
    assert load_tokens(yaml_file).principal(b"Basic from-the-env-1") is None
    b = load_tokens(toml_file).principal(b"bearer toml-token-2")
    assert b is not None and b.scope.tags == ("x",)
    assert Tokens.single("one-token").principal(b"BEARER one-token") is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("principals:\n  - name: a\n    token: [oops\n", "tokens.yaml:4: expected"),
        ("principals: []\n", "'principals' list"),
        ("principals:\n  - name: a\n    token: short\n", "tokens.yaml:2: principal 'a'"),
        ("principals:\n  - name: a\n    token: ${NOT_SET_ANYWHERE}\n", "NOT_SET_ANYWHERE"),
        ("principals:\n  - name: a\n    tokn: abcdefghij\n", "unknown field(s) tokn"),
        (
            "principals:\n  - name: a\n    token: abcdefghij\n  - name: b\n    token: abcdefghij\n",
            "tokens.yaml:4: principal 'b' reuses",
        ),
        ("principals:\n  - name: a\n    token: abcdefghij\n    toolkits: math\n", "'toolkits'"),
        ("principals:\n  - name: a\n    token: abcdefghij\n    any_tags: x\n", "'any_tags'"),
        (
            f"principals:\n  - name: a\n    token: abcdefghij\n    exclude_tags: [{'y' * 300}]\n",
            "tokens.yaml:2: principal 'a': exclude_tags: a tag is at most 200",
        ),
    ],
)
def test_malformed_tokens_file_names_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    with pytest.raises(TokensFileError) as raised:
        load_tokens(path)
    assert message in str(raised.value)
    assert "abcdefghij" not in str(raised.value)  # a token never appears in a message


def test_serve_refuses_to_start_on_a_bad_tokens_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text("principals:\n  - name: a\n    token: x\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolcat.cli",
            "--db",
            str(tmp_path / "c.db"),
            "serve",
            "--http",
            "--tokens",
            str(path),
        ],
        env=server_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "tokens.yaml:2" in done.stderr and "Traceback" not in done.stderr


def test_every_unset_variable_is_reported_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TOKEN_A", "TOKEN_C"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOKEN_B", "bbbbbbbbbb")
    path = tmp_path / "tokens.yaml"
    path.write_text(
        "principals:\n"
        "  - name: a\n    token: ${TOKEN_A}\n"
        "  - name: b\n    token: ${TOKEN_B}\n"
        "  - name: c\n    token: ${TOKEN_C}\n"
    )
    with pytest.raises(TokensFileError) as raised:
        load_tokens(path)
    message = str(raised.value)
    assert "\n" not in message
    assert "TOKEN_A (line 2, principal 'a')" in message
    assert "TOKEN_C (line 6, principal 'c')" in message
    assert "TOKEN_B" not in message and "bbbbbbbbbb" not in message
