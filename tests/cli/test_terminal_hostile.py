"""Text from outside — a manifest's descriptions, a client's query recorded as a use, a
tool's result, events and artifacts, a replica state file — reaches the admin's terminal
printable: no OSC (window title), no clear-screen, no C1 CSI, no bidi override, no line
separator; and JSON output carries none of them raw either."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.fixtures.terminal_tools import HOSTILE
from tests.helpers import SAMPLE_TOOLKITS, toolkit_data, write_manifest
from toolcat import Catalog, ToolEvent
from toolcat.cli import cli
from toolcat.cli.agent import artifact_line, show_progress
from toolcat.cli.text import json_text, printable
from toolcat.registry.python import toolkit_from_module

RAW = ("\x1b", "\x07", "\x9b", "\x85", "\u202e", "\u2028")


def assert_printable(*texts: str) -> None:
    for text in texts:
        found = [c for c in RAW if c in text]
        assert not found, f"raw {found!r} in {text!r}"
        assert all(c.isprintable() or c in "\n\t" for c in text), repr(text)


def run(db: Path, *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert_printable(result.stdout, result.stderr)
    return result


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOOLCAT_ARTIFACTS", str(tmp_path / "kept"))
    data = toolkit_data()
    data["description"] = f"toolkit {HOSTILE}"
    data["tools"][0]["description"] = f"weather {HOSTILE}\nsecond line {HOSTILE}"
    data["tools"][0]["parameters"]["properties"]["city"]["description"] = HOSTILE
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(
            write_manifest(tmp_path, data, suffix=".json"),
            SAMPLE_TOOLKITS / "math.yaml",
            toolkit_from_module("tests.fixtures.terminal_tools"),
        )
        assert catalog.record_use(f"weather {HOSTILE}", data["tools"][0]["name"])
    return path


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--include-deferred"),
        ("search", "weather", "--mode", "bm25"),
        ("show", "get_forecast"),
        ("toolkits",),
        ("usage", "show"),
        ("--isolate", "thread", "call", "noisy"),
    ],
    ids=lambda args: args[-1] if args[-1] != "--include-deferred" else "list",
)
def test_text_output_is_printable(db: Path, args: tuple[str, ...]) -> None:
    out = run(db, *args).stdout
    assert "pwned" in out or "evil" in out or "noisy" in args  # the text is shown, escaped


def test_show_keeps_a_description_s_lines(db: Path) -> None:
    out = run(db, "show", "get_forecast").stdout
    assert "\\x1b]0;pwned\\x07" in out and "\nsecond line " in out


def test_call_shows_events_artifacts_and_result_printable(db: Path) -> None:
    result = run(db, "--isolate", "thread", "call", "noisy")
    assert "line one" in result.stdout and "\nline two\ttabbed" in result.stdout
    assert "\\x1b[2J" in result.stderr  # the warning log line and the artifact, escaped
    assert "artifact a" in result.stderr


def test_a_failed_call_s_error_is_printable(db: Path) -> None:
    result = run(db, "--isolate", "thread", "call", "failing", code=16)
    assert "pwned" in result.stderr


def test_progress_lines_are_printable(capsys: pytest.CaptureFixture[str]) -> None:
    for event in (
        ToolEvent(kind="progress", progress=1, total=2, message=HOSTILE),
        ToolEvent(kind="status", state=HOSTILE, message=HOSTILE),
        ToolEvent(kind="log", level="info", message=HOSTILE),
    ):
        show_progress(event)
    err = capsys.readouterr().err
    assert_printable(err)
    assert err.count("\n") == 3 and err.count("pwned") == 4


def test_artifact_line_is_printable_once_echoed() -> None:
    event = ToolEvent(kind="artifact", name=f"r{HOSTILE}", mime_type=HOSTILE, message=HOSTILE)
    assert_printable(printable(artifact_line(event, None)))


def test_status_never_prints_a_planted_replica_state(db: Path) -> None:
    """A state file planted beside an ordinary catalog is never read (a replica is what its
    own meta says), so none of its text reaches the terminal, escaped or not."""
    Path(f"{db}.replica.json").write_text(
        json.dumps({"primary": f"s3://b/{HOSTILE}", "error": HOSTILE}), encoding="utf-8"
    )
    result = CliRunner().invoke(cli, ["--db", str(db), "status"])
    assert result.exit_code == 0, result.output
    assert_printable(result.stdout, result.stderr)
    assert "pwned" not in result.stdout + result.stderr and "replica" not in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--include-deferred", "--json"),
        ("search", "weather", "--mode", "bm25", "--json"),
        ("show", "get_forecast", "--json"),
        ("usage", "show", "--json"),
        ("--isolate", "thread", "call", "noisy", "--json"),
        ("export", "--format", "openai-chat", "--all"),
    ],
    ids=lambda args: args[-2] if args[-1] in ("--json", "--all") else args[-1],
)
def test_json_output_escapes_invisible_characters(db: Path, args: tuple[str, ...]) -> None:
    out = run(db, *args).stdout
    assert re.search(r"\\u001b\]0;pwned\\u0007", out)  # still all there, as JSON escapes
    assert "\\u009b31m\\u202eevil" in out
    json.loads(out)


@pytest.mark.parametrize(
    "text",
    ["plain", HOSTILE, "\U000e0001tag", "\ud800lone", "x\u00a0y"],
    ids=["plain", "hostile", "astral-format", "lone-surrogate", "nbsp"],
)
def test_json_text_round_trips(text: str) -> None:
    written = json_text({"k": text}, indent=2)
    assert_printable(written)
    assert json.loads(written) == {"k": text}


def test_ordinary_text_is_unchanged() -> None:
    assert printable("C:\\path and ünïcode — fine") == "C:\\path and ünïcode — fine"
    assert printable("a\r\nb\tc", lines=True) == "a\nb\tc"
    assert printable("a\rb") == "a\\x0db"


def test_every_command_writes_through_output() -> None:
    """Text is made printable in one place: no other CLI module writes on its own (but
    `quick`, a plain `toolcat list` without click, whose every byte test_quick_list.py
    compares with what `output` writes, on a catalog of escapes too)."""
    folder = Path(printable.__code__.co_filename).parent
    for module in sorted(folder.glob("*.py")):
        if module.name not in ("output.py", "quick.py"):
            text = module.read_text(encoding="utf-8")
            for writer in ("click.echo(", "click.secho(", "print(", "sys.stdout.write("):
                assert writer not in text, f"{module.name} writes with {writer}"
