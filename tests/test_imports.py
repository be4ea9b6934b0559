"""`import toolcat`, `toolcat --help`, list mode and BM25 search stay light: none of the
heavy packages, and none of the parts of toolcat a read does not run (asyncio, the call
runtime, reindexing)."""

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
    "onnxruntime",
    "tokenizers",
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


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_read_paths_import_nothing_heavy(tmp_path: Path, name: str) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    code = (
        f"DB = {str(db)!r}\n{SCRIPTS[name]}\n"
        "import sys, json\nprint(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    modules = set(json.loads(out.strip().splitlines()[-1]))
    loaded = [m for m in HEAVY if m in modules or any(x.startswith(m + ".") for x in modules)]
    assert loaded == []
