"""Learning from use through ``toolcat serve``: a search followed by a successful call of one
of its hits records (query, tool) in the catalog, per session (2025) or per caller (2026),
driven by the SDK's real client over stdio and HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from click.testing import CliRunner

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import (
    ERAS,
    LEGACY,
    MODERN,
    error_code,
    http_server,
    http_session,
    run,
    stdio_session,
)
from toolcat import Catalog
from toolcat.catalog import MAX_LEARNED_CHARS
from toolcat.cli import cli
from toolcat.server.usage import RecentSearches

DELETE = "get rid of the scratch file"
REMOVE = "erase a file from my workspace"
CONVERT = "how many miles is 5 km"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return path


def recorded(db: Path) -> list[tuple[str, str]]:
    """What `toolcat usage --json` shows, oldest first."""
    result = CliRunner().invoke(cli, ["--db", str(db), "usage", "--json"])
    assert result.exit_code == 0, result.output
    return [(u["query"], u["tool"]) for u in reversed(json.loads(result.output)["uses"])]


def found(result: object) -> list[str]:
    return [t["name"] for t in result.structured_content["tools"]]  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ERAS)
def test_search_then_call_records_the_use_on_both_call_paths(
    db: Path, tmp_path: Path, mode: str
) -> None:
    async def check() -> None:
        async with stdio_session(db, tmp_path, mode=mode) as s:
            (tmp_path / "a.txt").write_text("x")
            assert "delete_file" in found(await s.call("search_tools", {"query": DELETE}))
            via = await s.call("call_tool", {"name": "delete_file", "arguments": {"path": "a.txt"}})
            assert not via.is_error, via.content
            (tmp_path / "b.txt").write_text("x")
            assert "delete_file" in found(await s.call("search_tools", {"query": REMOVE}))
            direct = await s.call("delete_file", {"path": "b.txt"})  # revealed / by name
            assert not direct.is_error, direct.content
            # One search, one use: calling again without a new search records nothing more.
            (tmp_path / "c.txt").write_text("x")
            assert not (await s.call("delete_file", {"path": "c.txt"})).is_error

    run(check)
    assert recorded(db) == [(DELETE, "files.delete_file"), (REMOVE, "files.delete_file")]


@pytest.mark.parametrize("mode", ERAS)
def test_failed_and_unsearched_calls_record_nothing(db: Path, tmp_path: Path, mode: str) -> None:
    async def check() -> None:
        async with stdio_session(db, tmp_path, mode=mode) as s:
            assert "delete_file" in found(await s.call("search_tools", {"query": DELETE}))
            missing = await s.call("call_tool", {"name": "delete_file", "arguments": {}})
            assert error_code(missing) == "INVALID_ARGUMENTS"
            gone = await s.call("call_tool", {"name": "delete_file", "arguments": {"path": "no"}})
            assert error_code(gone) == "TOOL_ERROR"
            # A tool no search returned: called, but nothing to learn.
            converted = await s.call(
                "call_tool",
                {
                    "name": "convert_units",
                    "arguments": {"value": 1, "from_unit": "km", "to_unit": "m"},
                },
            )
            assert not converted.is_error, converted.content

    run(check)
    assert recorded(db) == []


@pytest.mark.parametrize("mode", ERAS)
def test_learning_off_records_nothing(db: Path, tmp_path: Path, mode: str) -> None:
    assert CliRunner().invoke(cli, ["--db", str(db), "usage", "off"]).exit_code == 0

    async def check() -> None:
        async with stdio_session(db, tmp_path, mode=mode) as s:
            (tmp_path / "a.txt").write_text("x")
            assert "delete_file" in found(await s.call("search_tools", {"query": DELETE}))
            ok = await s.call("call_tool", {"name": "delete_file", "arguments": {"path": "a.txt"}})
            assert not ok.is_error, ok.content

    run(check)
    assert recorded(db) == []
    with Catalog(db) as catalog:
        catalog.learning = True
    assert recorded(db) == []  # nothing was kept aside while it was off


TOKENS_YAML = """\
principals:
  - name: searcher
    token: searcher-token
    toolkits: [math, files]
  - name: math-only
    token: math-only-token
    toolkits: [math]
"""


def test_http_uses_are_per_principal_and_refused_calls_record_nothing(
    db: Path, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    with http_server(db, tmp_path, "--tokens", str(tokens)) as (url, _stderr):

        async def check() -> None:
            async with (
                http_session(url, "searcher-token", mode=MODERN) as searcher,
                http_session(url, "math-only-token", mode=MODERN) as other,
                http_session(url, "math-only-token", mode=LEGACY) as legacy,
            ):
                assert "convert_units" in found(
                    await searcher.call("search_tools", {"query": CONVERT})
                )
                assert "read_file" in found(
                    await searcher.call("search_tools", {"query": "show me what a file says"})
                )
                arguments = {"value": 5, "from_unit": "km", "to_unit": "mi"}
                # Another principal calls what this one found: not its search, not recorded.
                for client in (other, legacy):
                    ok = await client.call(
                        "call_tool", {"name": "convert_units", "arguments": arguments}
                    )
                    assert not ok.is_error, ok.content
                # A call its scope refuses records nothing, even though a search found it.
                refused = await other.call(
                    "call_tool", {"name": "read_file", "arguments": {"path": "x"}}
                )
                assert error_code(refused) == "UNKNOWN_TOOL"
                ok = await searcher.call(
                    "call_tool", {"name": "convert_units", "arguments": arguments}
                )
                assert not ok.is_error, ok.content

        run(check)
    assert recorded(db) == [(CONVERT, "math.convert_units")]


def test_the_memory_is_bounded() -> None:
    recent = RecentSearches(per_caller=3, max_callers=2)
    recent.searched("a", None, "q1", ["t1", "t2", "t3", "t4"])
    assert recent.called("a", None, "t1") is None  # the oldest hit dropped out
    assert recent.called("a", None, "t4") == "q1"
    assert recent.called("a", None, "t4") is None  # one search, one use
    recent.searched("b", None, "q2", ["t1"])
    recent.searched("c", None, "q3", ["t1"])
    assert len(recent) == 2
    assert recent.called("a", None, "t2") is None  # caller a was forgotten
    assert recent.called("c", None, "t1") == "q3"


def test_a_principals_client_names_push_out_only_its_own() -> None:
    recent = RecentSearches(per_caller=3, max_callers=4, max_clients=2)
    recent.searched(("victim", None), None, "q0", ["t0"])
    for n in range(50):  # the attacker's own token, a new client name each time
        recent.searched(("attacker", f"c{n}"), None, "x", ["t0"])
    assert len(recent) == 3  # the victim's one and the attacker's last two
    assert recent.called(("victim", None), None, "t0") == "q0"
    assert recent.called(("attacker", "c0"), None, "t0") is None  # its oldest name forgotten
    assert recent.called(("attacker", "c49"), None, "t0") == "x"
    assert recent.called(("nobody", None), None, "t0") is None and len(recent) == 3


def test_a_query_is_kept_as_a_use_records_it() -> None:
    recent = RecentSearches()
    recent.searched("a", None, "  " + "q" * 10_000, ["t"])
    assert recent.called("a", None, "t") == "q" * MAX_LEARNED_CHARS


POISON = "delete the file report.txt"
TEAMS_YAML = """\
principals:
  - name: attacker
    token: attacker-token
    toolkits: [math, files]
  - name: victim
    token: victim-token
    toolkits: [math, files]
"""


def reindex(db: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db), "reindex"])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_one_principals_uses_never_steer_what_another_finds(db: Path, tmp_path: Path) -> None:
    """The reported poisoning: one principal's 20 searches + calls of ``math.calculate`` for
    "delete the file …" requests, then a reindex. Another principal (and an anonymous
    caller) must find exactly what it found before; the attacker's own ranking moves each
    tool by at most LEARNED_LIFT places, and the uses are recorded under its name."""
    from toolcat.search.learned import LEARNED_LIFT

    reindex(db)  # vectors: hybrid ranks every tool, so calculate is among the hits
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TEAMS_YAML)

    async def ranking(url: str, token: str) -> list[str]:
        async with http_session(url, token, mode=MODERN) as s:
            return found(await s.call("search_tools", {"query": POISON, "k": 20}))

    async def anonymous() -> list[str]:
        async with stdio_session(db, tmp_path, mode=MODERN) as s:
            return found(await s.call("search_tools", {"query": POISON, "k": 20}))

    async def attack(url: str) -> None:
        async with http_session(url, "attacker-token", mode=MODERN) as s:
            for i in range(20):
                query = POISON if i == 0 else f"{POISON} please ({i})"
                assert "calculate" in found(await s.call("search_tools", {"query": query, "k": 50}))
                done = await s.call(
                    "call_tool", {"name": "calculate", "arguments": {"expression": "1+1"}}
                )
                assert not done.is_error, done.content

    with http_server(db, tmp_path, "--tokens", str(tokens)) as (url, _stderr):
        before = {who: anyio.run(ranking, url, f"{who}-token") for who in ("attacker", "victim")}
        anyio.run(attack, url)
    before["anonymous"] = anyio.run(anonymous)
    assert before["victim"][0] == "delete_file"
    reindex(db)
    with http_server(db, tmp_path, "--tokens", str(tokens)) as (url, _stderr):
        after = {who: anyio.run(ranking, url, f"{who}-token") for who in ("attacker", "victim")}
    after["anonymous"] = anyio.run(anonymous)

    assert after["victim"] == before["victim"]
    assert after["anonymous"] == before["anonymous"]
    moved = {
        name: before["attacker"].index(name) - after["attacker"].index(name)
        for name in before["attacker"]
        if name in after["attacker"]
    }
    assert moved["calculate"] > 0  # learning works for the one who taught it ...
    assert max(abs(m) for m in moved.values()) <= LEARNED_LIFT  # ... within its bound
    with Catalog(db) as catalog:
        uses = catalog.usage()
    assert len(uses) == 20 and {u["principal"] for u in uses} == {"attacker"}


@pytest.mark.parametrize("mode", ERAS)
def test_mcp_uses_are_recorded_under_the_caller(db: Path, tmp_path: Path, mode: str) -> None:
    async def check() -> None:
        async with stdio_session(db, tmp_path, mode=mode) as s:
            (tmp_path / "a.txt").write_text("x")
            assert "delete_file" in found(await s.call("search_tools", {"query": DELETE}))
            ok = await s.call("call_tool", {"name": "delete_file", "arguments": {"path": "a.txt"}})
            assert not ok.is_error, ok.content

    run(check)
    with Catalog(db) as catalog:
        assert [(u["tool"], u["principal"]) for u in catalog.usage()] == [
            ("files.delete_file", "anonymous")
        ]
