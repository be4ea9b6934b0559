"""One rule for where implementations are imported from: the caller's import path, with the
current directory first for the `toolcat` command. Registration, both isolations and check
agree, and a module that is not found says where the import looked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT
from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module

MODULE = '''"""Greetings."""
from toolcat import tool

__version__ = "1.0.0"


@tool
def greet(name: str) -> str:
    """Say hello."""
    return f"hello {name}"
'''


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the module's folder, another folder, a console script like the installed one)."""
    here = tmp_path / "project"
    here.mkdir()
    (here / "greetings_mod.py").write_text(MODULE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = tmp_path / "bin" / "toolcat"
    script.parent.mkdir()
    # Like pip's console script: sys.path[0] is the script's folder, not the current one.
    script.write_text("import sys\nfrom toolcat.cli import main\nsys.exit(main())\n")
    return here, elsewhere, script


def toolcat(script: Path, cwd: Path, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, str(script), "--db", str(db), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_module_beside_you_is_found_by_every_command(
    layout: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    here, _, script = layout
    db = tmp_path / "catalog.db"
    registered = toolcat(script, here, db, "register", "--module", "greetings_mod")
    assert registered.returncode == 0, registered.stderr
    for isolation in ("thread", "process"):
        called = toolcat(script, here, db, "--isolate", isolation, "call", "greet",
                         "--args", '{"name": "you"}')  # fmt: skip
        assert (called.returncode, called.stdout.strip()) == (0, "hello you"), called.stderr
    checked = toolcat(script, here, db, "check")
    assert checked.returncode == 0 and "ok   greetings_mod.greet" in checked.stdout


def test_a_module_not_found_says_where_the_import_looked(
    layout: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    here, elsewhere, script = layout
    db = tmp_path / "catalog.db"
    failed = toolcat(script, elsewhere, db, "register", "--module", "greetings_mod")
    assert failed.returncode == 3
    assert "No module named 'greetings_mod'" in failed.stderr
    assert f"searched the import path: '{elsewhere}' (the current directory)" in failed.stderr
    assert toolcat(script, here, db, "register", "--module", "greetings_mod").returncode == 0
    for isolation in ("thread", "process"):  # the same answer in either isolation
        called = toolcat(script, elsewhere, db, "--isolate", isolation, "call", "greet",
                         "--args", '{"name": "you"}')  # fmt: skip
        assert called.returncode == 9, called.stderr
        assert f"searched the import path: '{elsewhere}'" in called.stderr


def test_a_worker_imports_from_exactly_the_callers_path(
    layout: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, elsewhere, _ = layout
    db = tmp_path / "catalog.db"
    monkeypatch.syspath_prepend(str(here))
    with Catalog(db) as catalog:
        catalog.register(toolkit_from_module("greetings_mod"))
    monkeypatch.chdir(elsewhere)
    with Catalog(db, isolation="process") as catalog:
        assert catalog.call("greet", {"name": "w"}).data == "hello w"
        assert catalog.check()[0]["ok"]
    monkeypatch.undo()  # the module's folder is off the path now, and not the current one
    sys.modules.pop("greetings_mod", None)
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(here))])
    with Catalog(db, isolation="process") as catalog:  # `python -m` would have found it here
        result = catalog.call("greet", {"name": "w"})
        assert result.error_code == "IMPORT_FAILED" and "searched the import path" in (
            result.error or ""
        )
