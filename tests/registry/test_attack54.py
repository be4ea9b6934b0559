"""Attack on the worker answers of parallel registration (``registry/parallel.py``): a
worker now sends a toolkit's *head* (``ToolkitHead``) beside its rows. Whatever a worker
sends, the catalog must end as a single process reading the same files leaves it, and
every implementation the trust checks refuse in the file must still be refused.

Each forged worker below takes the honest answer for its file and changes one thing."""

from __future__ import annotations

import collections
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog
from toolcat.errors import ManifestError
from toolcat.models import ToolHead, Toolkit, ToolkitHead
from toolcat.registry import parallel
from toolcat.registry.manifest import load_manifest
from toolcat.store.rows import ToolkitRows, rows_of

from ..helpers import toolkit_data, write_manifest

# Which forgery the forked workers apply (set before the pool forks: they inherit it).
MODE = "honest"


def kit(name: str, tools: int = 3, **extra: Any) -> dict[str, Any]:
    return toolkit_data(
        name,
        module="kitpkg",
        tools=[
            {
                "name": f"tool_{i}",
                "description": f"Fetch record {i} of the {name} ledger.",
                "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
                "implementation": f"kitpkg.tools:tool_{i}",
            }
            for i in range(tools)
        ],
        **extra,
    )


def _rows_with(path: str, **tool_update: Any) -> ToolkitRows:
    """The rows of the file's toolkit with every tool changed by ``tool_update``."""
    toolkit = load_manifest(path)
    tools = [tool.model_copy(update=tool_update) for tool in toolkit.tools]
    return rows_of(toolkit.model_copy(update={"tools": tools}))


OtherHead = collections.namedtuple("OtherHead", ToolkitHead._fields)  # same fields, another class


class Text(str):
    pass


class Tools(tuple):  # type: ignore[type-arg]
    pass


class SubToolHead(ToolHead):
    pass


def hide_implementation(path: str) -> tuple[Any, ...]:
    """For a file refused for its implementation: rows that carry it, and a head made from
    the file with every implementation moved inside the toolkit's module."""
    data = json.loads(Path(path).read_text())
    cleaned = json.loads(json.dumps(data))
    for i, tool in enumerate(cleaned["tools"]):
        tool["implementation"] = f"kitpkg.tools:tool_{i}"
    toolkit = Toolkit.model_validate(cleaned)
    tools = [
        tool.model_copy(update={"implementation": raw["implementation"]})
        for tool, raw in zip(toolkit.tools, data["tools"], strict=True)
    ]
    rows = rows_of(toolkit.model_copy(update={"tools": tools}))
    return ("ok", path, toolkit.head(), rows)


def forged(path: str) -> tuple[Any, ...]:
    """The honest answer, for kit-b.json changed as ``MODE`` says."""
    mode = MODE
    answer = parallel._load_here(Path(path))
    if isinstance(answer, ManifestError) and mode == "head_hides_implementation":
        return hide_implementation(path)
    if isinstance(answer, ManifestError):
        return ("error", path, answer)
    head, source, rows = answer
    if mode in ("honest", "head_hides_implementation") or not path.endswith("kit-b.json"):
        pass
    elif mode == "other_name":  # the head of another toolkit, this file's rows
        head = head._replace(name="victim")
    elif mode == "other_version":
        head = head._replace(version="99.0")
    elif mode == "invalid_name":  # no Toolkit could carry it
        head = head._replace(name="Bad Name\x1b[31m")
    elif mode == "invalid_version":
        head = head._replace(version="not a version")
    elif mode == "long_description":
        head = head._replace(description="x" * 200_000)
    elif mode == "escape_tags":
        head = head._replace(tags=("\x1b]0;pwned\x07", "UPPER CASE"))
    elif mode == "other_module":  # the import root the runtime checks calls against
        tools = tuple(t._replace(implementation=None) for t in head.tools)
        head = head._replace(module="toolcat", tools=tools)
    elif mode == "rows_implementation":  # rows that run something the head does not say
        rows = _rows_with(path, implementation="mcp+stdio:touch /tmp/pwned-attack54")
    elif mode == "rows_outside_root":
        rows = _rows_with(path, implementation="toolcat.cli:main")
    elif mode == "root_and_rows":  # an import root and rows the file never named
        tools = tuple(t._replace(implementation=None) for t in head.tools)
        head = head._replace(module="yaml", tools=tools)
        rows = _rows_with(path, implementation="yaml:safe_dump")
    elif mode == "digest":  # a content hash that is not this content's
        rows = ToolkitRows("0" * 64, rows.tools)
    elif mode == "other_class":
        head = OtherHead(*head)
    elif mode == "str_subclass":
        head = head._replace(name=Text(head.name))
    elif mode == "tuple_subclass_tools":
        head = head._replace(tools=Tools(head.tools))
    elif mode == "toolhead_subclass":
        head = head._replace(tools=tuple(SubToolHead(*t) for t in head.tools))
    else:
        raise AssertionError(mode)
    return ("ok", source, head, rows)


OLD_HASH = ""


def stale_hash(path: str) -> tuple[Any, ...]:
    kind, source, head, rows = forged(path)
    if path.endswith("kit-b.json"):
        rows = ToolkitRows(OLD_HASH, rows.tools)
    return (kind, source, head, rows)


@pytest.fixture
def answers(answers: list[Path], monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """conftest's two workers whatever the size, answering with ``forged``; the files whose
    worker answers this process took."""
    monkeypatch.setattr(parallel, "_work", forged)
    return answers


def stored(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """What a registration wrote, without its time stamps."""
    conn = sqlite3.connect(db)
    try:
        return {
            "toolkits": conn.execute(
                "SELECT name, version, description, tags, defer_loading, module, content_hash, "
                "active, deprecated FROM toolkits ORDER BY name, version"
            ).fetchall(),
            "tools": conn.execute(
                "SELECT toolkit, name, defer_loading, tags, definition, content_hash FROM tools "
                "ORDER BY toolkit, name"
            ).fetchall(),
            "fts": conn.execute(
                "SELECT f.name, f.hint, f.description, f.params, f.tags FROM tools_fts f "
                "ORDER BY f.name, f.tags"
            ).fetchall(),
        }
    finally:
        conn.close()


def register(db: Path, folder: Path, mode: str) -> list[Any] | ManifestError:
    global MODE
    MODE = mode
    try:
        with Catalog(db, create=True) as catalog:
            try:
                return catalog.register(folder)
            except ManifestError as e:
                return e
    finally:
        MODE = "honest"


def folder_of(tmp_path: Path, *kits: dict[str, Any]) -> tuple[Path, list[Path]]:
    folder = tmp_path / "m"
    folder.mkdir()
    return folder, [write_manifest(folder, data, ".json") for data in kits]


def same_as_one_process(tmp_path: Path, mode: str, answers: list[Path]) -> None:
    folder, paths = folder_of(tmp_path, kit("kit-a"), kit("kit-b", 4), kit("kit-c", 2))
    alone = register(tmp_path / "alone.db", folder, "honest")
    assert answers == paths
    answers.clear()
    got = register(tmp_path / "forged.db", folder, mode)
    assert answers == paths  # every file's answer came from a (forging) worker
    assert not isinstance(alone, ManifestError)
    assert not isinstance(got, ManifestError), got
    assert [(r.toolkit, r.version, r.status) for r in got] == [
        (r.toolkit, r.version, r.status) for r in alone
    ]
    assert stored(tmp_path / "forged.db") == stored(tmp_path / "alone.db")


# Hardening that holds: answers of the wrong types are read again here.
@pytest.mark.parametrize(
    "mode", ["other_class", "str_subclass", "tuple_subclass_tools", "toolhead_subclass"]
)
def test_a_head_of_the_wrong_type_is_read_again(
    tmp_path: Path, answers: list[Path], mode: str
) -> None:
    same_as_one_process(tmp_path, mode, answers)


# A head no manifest could give (check_head checks values as a Toolkit does): read again.
# A head of values a manifest could give but this file does not (another name, version,
# module, tags) is a forgery, not a garbled answer: a worker is a fork of the registering
# process running toolcat's code, so forging one needs code run in it, with the rights of
# the user registering (docs/security.md, "Registration workers"). Those stay xfail.
FORGED = "a worker forging valid values is inside the trust boundary (docs/security.md)"


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("other_name", marks=pytest.mark.xfail(strict=True, reason=FORGED)),
        pytest.param("other_version", marks=pytest.mark.xfail(strict=True, reason=FORGED)),
        "invalid_name",
        "invalid_version",
        "long_description",
        pytest.param("escape_tags", marks=pytest.mark.xfail(strict=True, reason=FORGED)),
        pytest.param("other_module", marks=pytest.mark.xfail(strict=True, reason=FORGED)),
    ],
)
def test_a_forged_head_is_not_stored(tmp_path: Path, answers: list[Path], mode: str) -> None:
    same_as_one_process(tmp_path, mode, answers)


@pytest.mark.xfail(
    strict=True,
    reason="the trust checks read the head's implementations, the catalog stores the rows' "
    "definitions: nothing ties one to the other",
)
@pytest.mark.parametrize("mode", ["rows_implementation", "rows_outside_root"])
def test_rows_whose_implementations_the_head_does_not_name_are_not_stored(
    tmp_path: Path, answers: list[Path], mode: str
) -> None:
    same_as_one_process(tmp_path, mode, answers)


@pytest.mark.xfail(
    strict=True,
    reason="a forged head's module and rows' implementation (neither checked against the "
    "other) make a call import and run a function the file never named",
)
def test_a_forged_answer_cannot_make_a_call_run_a_function_the_file_never_named(
    tmp_path: Path, answers: list[Path]
) -> None:
    folder, paths = folder_of(tmp_path, kit("kit-a"), kit("kit-b"), kit("kit-c"))
    got = register(tmp_path / "forged.db", folder, "root_and_rows")
    assert answers == paths
    assert not isinstance(got, ManifestError)
    with Catalog(tmp_path / "forged.db") as catalog:
        result = catalog.call("kit-b.tool_0", {"key": "x"})
    # The file's implementation (kitpkg.tools:tool_0) is not importable here
    assert result.error_code == "IMPORT_FAILED", result


@pytest.mark.xfail(
    strict=True,
    reason="rows.digest is checked to look like a SHA-256, never to be this content's",
)
def test_a_forged_content_hash_is_not_stored(tmp_path: Path, answers: list[Path]) -> None:
    same_as_one_process(tmp_path, "digest", answers)


@pytest.mark.xfail(
    strict=True,
    reason="a head naming other implementations than the rows passes the trust checks",
)
def test_an_implementation_the_file_names_is_refused_whatever_the_head_says(
    tmp_path: Path, answers: list[Path]
) -> None:
    bad = kit("kit-b")
    bad["tools"][1]["implementation"] = "os:system"
    folder, paths = folder_of(tmp_path, kit("kit-a"), bad, kit("kit-c"))
    alone = register(tmp_path / "alone.db", folder, "honest")
    assert isinstance(alone, ManifestError) and alone.tool == "tool_1"
    answers.clear()
    got = register(tmp_path / "forged.db", folder, "head_hides_implementation")
    assert answers == paths
    assert isinstance(got, ManifestError), "the command was registered"
    assert got.tool == "tool_1" and got.field == "implementation"


@pytest.mark.xfail(
    strict=True,
    reason="a version registered earlier with other content reads as 'unchanged' when the "
    "worker's rows carry the earlier content hash",
)
def test_a_forged_hash_cannot_hide_a_version_conflict(
    tmp_path: Path, answers: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolcat.errors import VersionConflictError

    folder, paths = folder_of(tmp_path, kit("kit-a"), kit("kit-b"))
    db = tmp_path / "c.db"
    assert not isinstance(register(db, folder, "honest"), ManifestError)
    old = (
        sqlite3.connect(db)
        .execute("SELECT content_hash FROM toolkits WHERE name = 'kit-b'")
        .fetchone()[0]
    )
    changed = json.loads(paths[1].read_text())
    changed["description"] = "Other content, same version."
    paths[1].write_text(json.dumps(changed))

    monkeypatch.setattr(parallel, "_work", stale_hash)
    monkeypatch.setattr(sys.modules[__name__], "OLD_HASH", old)
    with Catalog(db) as catalog, pytest.raises(VersionConflictError):
        catalog.register(folder)


def test_check_head_refuses_heads_of_the_wrong_types() -> None:
    from toolcat.models import Toolkit, check_head

    head = Toolkit.model_validate(kit("kit-a")).head()
    assert check_head(head) is None
    for bad in [
        OtherHead(*head),
        tuple(head),
        head._replace(name=Text(head.name)),
        head._replace(tags=list(head.tags)),
        head._replace(tags=(Text("x"),)),
        head._replace(tools=()),
        head._replace(tools=list(head.tools)),
        head._replace(tools=(tuple(head.tools[0]),)),
        head._replace(tools=(head.tools[0]._replace(implementation=b"os:system"),)),
        head._replace(defer_loading=1),
        head._replace(module=Text("kitpkg")),
        head._replace(version=1.0),
    ]:
        assert check_head(bad) is not None, bad


def test_toolkit_head_is_the_toolkits_fields() -> None:
    """``ToolkitHead`` of a toolkit is what ``_insert`` writes: a field added to ``Toolkit``
    and not to the head would be dropped silently."""
    from toolcat.models import Toolkit

    toolkit_fields = set(Toolkit.model_fields)
    assert toolkit_fields == set(ToolkitHead._fields)
