"""The provider agent examples, run end to end against recorded provider replies (no network):
the loop answers the provider's tool search from the catalog and runs the chosen tool."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("script", "recording"),
    [
        ("openai_responses_agent.py", "openai_responses.json"),
        ("anthropic_agent.py", "anthropic.json"),
    ],
)
def test_agent_example_replays(script: str, recording: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / script),
            "--replay",
            str(ROOT / "examples" / "recorded" / recording),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("search 'prime factors of a number' -> ['math.prime_factors'")
    assert lines[1].startswith("call math.prime_factors@1.0.0 -> ")
    assert "'factors': [2, 2, 2, 3, 3, 5]" in lines[1]
    assert lines[-1] == "360 = 2 × 2 × 2 × 3 × 3 × 5."
