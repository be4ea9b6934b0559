"""Inside a scope, what is out of scope does not exist: a caller limited to ``math`` who
names, guesses or misspells a tool outside it gets exactly what it would get from a server
whose catalog holds ``math`` alone: the same error code, the same message, suggestions from
its scope only. Driven by the SDK's real client, both eras, over stdio and HTTP, for every
way a scope is set: ``--toolkit``, ``--deny``/``--allow`` of the server and of the catalog,
and a tokens file's principals (toolkits, or deny rules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import (
    ERAS,
    MODERN,
    Session,
    http_server,
    http_session,
    run,
    stdio_session,
)
from toolcat import Catalog, Toolkit
from toolcat.errors import AmbiguousNameError, UnknownToolError
from toolcat.server.scope import Scope

# Out of scope (they exist), guesses around them, and names that exist nowhere.
PROBES = [
    "delete_file",
    "files.delete_file",
    "files.delete_file@1.0.0",
    "sqlite_execute",
    "sqlite.sqlite_execute",
    "SQLITE_EXECUTE",
    "delete_files",
    "delete",
    "execute sql",
    "read_fil",
    "write",
    "files.nosuch",
    "nosuch_tool",
    "calculat",
    "math.delete_file",
]
ADD = "tests.fixtures.tools:add"
MATH_ONLY = ("--deny", "toolkit:*", "--allow", "toolkit:math")
TOKENS_YAML = """\
principals:
  - name: math-team
    token: math-team-token
    toolkits: [math]
  - name: math-by-rules
    token: math-rules-token
    deny: ["toolkit:files", "toolkit:sqlite", "toolkit:data", "toolkit:text", "toolkit:time"]
"""


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The whole sample catalog, and one holding only its math toolkit (the reference)."""
    folder = tmp_path_factory.mktemp("leaks")
    whole, math_only = folder / "whole.db", folder / "math.db"
    with Catalog(whole) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    with Catalog(math_only) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    return whole, math_only


async def answers(session: Session) -> list[tuple[str, Any, bool, str]]:
    """What every probe gets, called by its name and through call_tool."""
    got = []
    for name in PROBES:
        for how in ("direct", "call_tool"):
            if how == "direct":
                result = await session.call(name, {"path": "x"})
            else:
                result = await session.call("call_tool", {"name": name, "arguments": {}})
            message = result.content[0].text
            got.append((name, how, bool(result.is_error), message))
    return got


@pytest.fixture(scope="module")
def reference(dbs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """What an unscoped server over the math-only catalog answers."""
    tmp = tmp_path_factory.mktemp("reference")
    found: list[Any] = []

    async def collect() -> None:
        async with stdio_session(dbs[1], tmp, mode=MODERN) as s:
            found.extend(await answers(s))

    run(collect)
    assert all(is_error for _, _, is_error, _ in found)
    assert all(m.startswith("UNKNOWN_TOOL: unknown tool") for *_, m in found), found
    return found


def leaked(answered: list[Any]) -> list[str]:
    """Messages that suggest a tool of an out-of-scope toolkit or refuse instead of not
    knowing (the probe's own name is echoed, and is no leak)."""
    return [
        message
        for *_, message in answered
        if not message.startswith("UNKNOWN_TOOL: ")
        or any(
            toolkit in message.partition("Did you mean:")[2]
            for toolkit in ("files.", "sqlite.", "data.", "text.", "time.")
        )
    ]


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize(
    "how",
    [
        pytest.param((("--toolkit", "math"), ()), id="serve-toolkit"),
        pytest.param((MATH_ONLY, ()), id="serve-rules"),
        pytest.param(((), MATH_ONLY), id="catalog-rules"),
    ],
)
def test_out_of_scope_is_as_nonexistent_over_stdio(
    dbs: tuple[Path, Path], reference: list[Any], tmp_path: Path, mode: str, how: Any
) -> None:
    serve_args, policy = how
    got: list[Any] = []

    async def check() -> None:
        async with stdio_session(dbs[0], tmp_path, *serve_args, mode=mode, policy=policy) as s:
            got.extend(await answers(s))

    run(check)
    assert leaked(got) == []
    assert got == reference


def test_out_of_scope_is_as_nonexistent_for_principals_over_http(
    dbs: tuple[Path, Path], reference: list[Any], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    with http_server(dbs[0], tmp_path, "--tokens", str(tokens)) as (url, _stderr):
        for token in ("math-team-token", "math-rules-token"):
            for mode in ERAS:
                got: list[Any] = []

                async def check(token: str = token, mode: str = mode, got: list[Any] = got) -> None:
                    async with http_session(url, token, mode=mode) as s:
                        got.extend(await answers(s))

                run(check)
                assert leaked(got) == [], (token, mode)
                assert got == reference, (token, mode)


def toolkit(name: str, *tools: str, tags: tuple[str, ...] = ()) -> Toolkit:
    return Toolkit.model_validate(
        {
            "toolkit": name,
            "version": "1.0.0",
            "tags": list(tags),
            "module": "tests.fixtures",
            "tools": [
                {"name": t, "description": f"{t} of {name}", "implementation": ADD} for t in tools
            ],
        }
    )


def test_catalog_get_within_a_selection(tmp_path: Path) -> None:
    """Ambiguity, deprecated versions and short names count only what is inside."""
    with Catalog(tmp_path / "c.db") as catalog:
        catalog.register(
            toolkit("mine", "lookup", "report"),
            toolkit("theirs", "lookup", "secret_report", tags=("private",)),
        )
        catalog.register(toolkit("old", "vintage"))
        catalog.deprecate("old", "1.0.0")
        mine = Scope(toolkits=("mine",))
        assert catalog.get("lookup", within=mine).id == "mine.lookup"  # unique inside
        with pytest.raises(AmbiguousNameError):
            catalog.get("lookup")
        for name in ("secret_report", "theirs.lookup", "vintage", "theirs.secret_report@1.0.0"):
            with pytest.raises(UnknownToolError) as caught:
                catalog.get(name, within=mine)
            assert type(caught.value) is UnknownToolError, name  # not "deprecated"
            assert all(s.startswith("mine.") for s in caught.value.suggestions), name
        tools = catalog.list(toolkit="mine").tools
        assert catalog.short_names(tools, within=mine)["mine.lookup"] == "lookup"
        assert catalog.short_names(tools)["mine.lookup"] == "mine.lookup"
        nowhere = Scope(toolkits=("nosuch",))  # a principal's toolkit nobody registered
        with pytest.raises(UnknownToolError) as caught:
            catalog.get("mine.lookup", within=nowhere)
        assert caught.value.suggestions == [] and "mine" not in str(caught.value).split("'")[2]
        tagged = Scope(tags=("private",))
        assert catalog.get("lookup", within=tagged).id == "theirs.lookup"


def test_a_principals_unregistered_toolkit_suggests_no_other(
    dbs: tuple[Path, Path], tmp_path: Path
) -> None:
    """Hostile (leaks in words): a principal scoped to a toolkit no one registered (a typo,
    or one removed since) searches and lists: the answer says its toolkit does not exist,
    as a catalog holding its scope alone would, and suggests no toolkit outside it ("Did
    you mean: files?")."""
    from mcp.shared.exceptions import MCPError

    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "principals:\n"
        "  - name: typo\n    token: typo-token\n    toolkits: [file]\n"
        "  - name: pinned\n    token: pinned-token\n    toolkits: ['files@9']\n"
    )
    with http_server(dbs[0], tmp_path, "--tokens", str(tokens)) as (url, _stderr):
        for token, name in (("typo-token", "file"), ("pinned-token", "files")):
            said: list[str] = []

            async def check(token: str = token, said: list[str] = said) -> None:
                async with http_session(url, token, mode=MODERN) as s:
                    found = await s.call("search_tools", {"query": "read a file"})
                    assert found.is_error
                    said.append(found.content[0].text)
                    with pytest.raises(MCPError) as listed:
                        await s.all_tools()
                    said.append(str(listed.value))

            run(check)
            for message in said:
                assert f"no toolkit named {name!r}" in message, message
                assert "Did you mean" not in message and "registered" not in message, message


@pytest.mark.parametrize(
    ("toolkits", "error", "said"),
    [
        (("file",), "no toolkit named 'file'. Did you mean: files?", "no toolkit named 'file'."),
        (("files@9",), "toolkit 'files' has no version '9'; registered: 1.0.0", None),
        (("files",), "every version of toolkit 'files' is deprecated; pin one: files@1", None),
    ],
)
def test_a_scoped_toolkit_error_names_nothing_outside_the_scope(
    toolkits: tuple[str, ...], error: str, said: str | None
) -> None:
    """What a scoped search or list passes on of a missing toolkit: nothing of other
    toolkits or versions; the deprecated case, which names only the scope's own toolkit's
    versions, as it is."""
    from toolcat.catalog import unknown_toolkit
    from toolcat.errors import DeprecatedToolkitError, UnknownToolkitError
    from toolcat.server.mcp import _within

    scope = Scope(toolkits=toolkits)
    raised = (
        DeprecatedToolkitError(error) if error.startswith("every") else UnknownToolkitError(error)
    )
    passed = _within(scope, raised)
    if toolkits == ("files",):
        assert passed is raised
    else:
        name = toolkits[0].partition("@")[0]
        assert str(passed) == (said or str(unknown_toolkit(name, ())))
        assert "registered" not in str(passed) and "Did you mean" not in str(passed)
    assert _within(Scope(), raised) is raised  # no single toolkit: as the catalog says
