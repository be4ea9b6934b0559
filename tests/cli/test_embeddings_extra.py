"""Without the embeddings extra (no onnxruntime, no tokenizers), every message that meets it
says which extra to install, and none says "reinstall toolcat" or "run `toolcat reindex`"
alone (which cannot work there)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, SAMPLE_TOOLKITS
from toolcat import Catalog

WITHOUT_EXTRA = """\
import sys
sys.modules["onnxruntime"] = None  # find_spec and import both say: not installed
sys.modules["tokenizers"] = None
from toolcat.cli import main
sys.argv[0] = "toolcat"
main()
"""
EXTRA = "pip install 'toolcat[embeddings]'"
FROM_CLONE = "pip install '.[embeddings]'"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("extra") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "files.yaml")
    return path


def without_extra(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, "--db", str(db), *args],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(db.parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args",
    [("search", "delete a file", "--mode", "hybrid"), ("status",), ("reindex",)],
    ids=lambda args: args[0],
)
def test_every_message_names_the_extra(db: Path, args: tuple[str, ...]) -> None:
    done = without_extra(db, *args)
    said = done.stdout + done.stderr
    assert EXTRA in said and FROM_CLONE in said, said
    assert "reinstall" not in said and "damaged" not in said
    assert "Traceback" not in said
