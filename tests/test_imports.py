"""`import toolcat`, `toolcat --help`, list mode and BM25 search stay light: none of the
heavy packages, and none of the parts of toolcat a read does not run (asyncio, the call
runtime, reindexing). A one-shot `toolcat list` goes further: it builds no models, so it
imports neither pydantic (alone several times a bare Python start) nor the search, write and
registration machinery (README, "Catalog: registration, list, BM25 search")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog

HEAVY = [
    "torch",
    "sentence_transformers",
    "numpy",
    "mcp",
    "httpx",
    "opentelemetry",
    "prometheus_client",
    "onnxruntime",
    "tokenizers",
    "faiss",
    "toolcat.search.reindex",
    "asyncio",
    "toolcat.runtime.call",
    "sqlite_utils",
    "jsonschema",
    "toolcat.samples",
]

CLI = (
    "from toolcat.cli import cli\n"
    "try:\n    cli.main({args})\nexcept SystemExit as e:\n    assert not e.code, e.code"
)
SCRIPTS = {
    "import": "import toolcat",
    "help": (
        "from toolcat.cli import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass"
    ),
    "list": "import toolcat\ntoolcat.Catalog(DB).list(tags=['read-only'])",
    "cli list": CLI.format(args="['--db', DB, 'list', '--json']"),
    "cli bm25": CLI.format(args="['--db', DB, 'search', 'convert units', '--mode', 'bm25']"),
    "search": "import toolcat\ntoolcat.Catalog(DB).search('convert units', mode='bm25')",
    "show": "import toolcat\ntoolcat.Catalog(DB).get('files.read_file')",
}


# What the list path (and `import toolcat`, `toolcat --help`) must not import on top of HEAVY.
NOT_FOR_LIST = [
    "pydantic",
    "pydantic_core",
    "toolcat.models",
    "toolcat.search.engine",
    "toolcat.search.bm25",
    "toolcat.store.writer",
    "toolcat.export.providers",  # the exporting code (export.formats is light)
    "toolcat.registry.manifest",
    "packaging",
    "regex",
    "snowballstemmer",
    "yaml",
    "fastjsonschema",
    "importlib.metadata",
]
LIST_SCRIPTS = {
    "import": "import toolcat",
    "help": SCRIPTS["help"],
    "cli list": SCRIPTS["cli list"],
    "cli list text": CLI.format(
        args="['--db', DB, 'list', '--tag', 'read-only', '--include-deferred', '--limit', '2']"
    ),
    "cli list pages": CLI.format(
        args="['--db', DB, 'list', '--json', '--limit', '1', '--cursor', 'WyJkYXRhIiwiYSJd']"
    ),
    "list_summaries": "import toolcat\ntoolcat.Catalog(DB).list_summaries(tags=['read-only'])",
}


def modules_after(tmp_path: Path, script: str) -> set[str]:
    """``sys.modules`` of a fresh interpreter that ran ``script`` (``DB``: the sample catalog)."""
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    code = f"DB = {str(db)!r}\n{script}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def loaded(modules: set[str], names: list[str]) -> list[str]:
    return [m for m in names if m in modules or any(x.startswith(m + ".") for x in modules)]


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_read_paths_import_nothing_heavy(tmp_path: Path, name: str) -> None:
    assert loaded(modules_after(tmp_path, SCRIPTS[name]), HEAVY) == []


@pytest.mark.parametrize("name", list(LIST_SCRIPTS))
def test_list_path_imports_no_models(tmp_path: Path, name: str) -> None:
    modules = modules_after(tmp_path, LIST_SCRIPTS[name])
    assert "toolcat.catalog" in modules or name == "import"  # the script did run the path
    assert loaded(modules, HEAVY + NOT_FOR_LIST) == []


# A `toolcat list` loads no other command's module: a plain one not even click (the quick
# path, tests/cli/test_quick_list.py), one with a global option only the agent's commands.
OTHER_COMMANDS = ["toolcat.cli.admin", "toolcat.cli.operator", "toolcat.cli.console"]
NOT_FOR_CLI_LIST = [*OTHER_COMMANDS, "logging"]
QUICK_LIST = (
    "from toolcat.cli.quick import quick_list\n"
    "assert quick_list(['--db', DB, 'list', '--json']) == 0"
)


def test_a_plain_list_imports_neither_click_nor_other_commands(tmp_path: Path) -> None:
    modules = modules_after(tmp_path, QUICK_LIST)
    assert "toolcat.catalog" in modules
    assert loaded(modules, HEAVY + NOT_FOR_LIST + NOT_FOR_CLI_LIST) == []
    assert loaded(modules, ["click", "toolcat.cli.root", "toolcat.cli.agent"]) == []


@pytest.mark.parametrize(
    "args",
    [
        "['--db', DB, 'list', '--json']",
        "['--db', DB, '--deny', 'tag:destructive', 'list', '--include-deferred']",
    ],
)
def test_list_through_click_imports_no_other_command(tmp_path: Path, args: str) -> None:
    modules = modules_after(tmp_path, CLI.format(args=args))
    assert "toolcat.cli.agent" in modules and "click" in modules
    assert loaded(modules, HEAVY + NOT_FOR_LIST + NOT_FOR_CLI_LIST) == []


def test_help_loads_every_command(tmp_path: Path) -> None:
    """The check above can fail: `--help` lists every command, so it imports them all."""
    assert loaded(modules_after(tmp_path, SCRIPTS["help"]), OTHER_COMMANDS) == OTHER_COMMANDS


# A one-shot `toolcat search` builds no models either (``search_summaries``): pydantic was
# half of a cold BM25 search (README, "Speed: one-shot search ...").
MODELS = ["pydantic", "pydantic_core", "toolcat.models"]
SEARCH_SCRIPTS = {
    "cli bm25": SCRIPTS["cli bm25"],
    "cli bm25 json": CLI.format(
        args="['--db', DB, 'search', 'read a file', '--mode', 'bm25', '--json', '-k', '3']"
    ),
    "cli exact name": CLI.format(args="['--db', DB, 'search', 'files.read_file', '--json']"),
    "cli empty query": CLI.format(args="['--db', DB, 'search', '', '--json']"),
    "search_summaries": "import toolcat\ntoolcat.Catalog(DB).search_summaries('convert units')",
}


@pytest.mark.parametrize("name", list(SEARCH_SCRIPTS))
def test_one_shot_search_imports_no_models(tmp_path: Path, name: str) -> None:
    modules = modules_after(tmp_path, SEARCH_SCRIPTS[name])
    assert "toolcat.search.engine" in modules or name == "cli empty query"  # it did search
    assert loaded(modules, HEAVY + MODELS) == []


def test_the_path_that_builds_models_is_seen(tmp_path: Path) -> None:
    """The checks above can fail: ``Catalog.search`` builds models, and it is caught."""
    assert loaded(modules_after(tmp_path, SCRIPTS["search"]), NOT_FOR_LIST)[:2] == [
        "pydantic",
        "pydantic_core",
    ]
