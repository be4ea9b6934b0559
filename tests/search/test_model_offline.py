"""``reindex --model NAME`` of a model that is nowhere here fails at once with one line (no
hub is reachable from many machines: 80 s of retry lines came before the error)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import ROOT, SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.errors import EmbeddingError


def test_a_model_not_here_fails_at_once(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env |= {"PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), "reindex", "--model", "no-such-model"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - started < 20
    assert done.returncode == EmbeddingError.exit_code
    (line,) = done.stderr.strip().splitlines()
    assert "'no-such-model'" in line and "folder" in line and "Retry" not in line
