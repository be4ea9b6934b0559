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


def test_anthropic_example_with_anthropics_own_regex_search() -> None:
    """--search regex sends Anthropic's search tool; Anthropic searches, the loop calls."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "anthropic_agent.py"),
            "--search",
            "regex",
            "--replay",
            str(ROOT / "examples" / "recorded" / "anthropic_regex.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "search by Anthropic -> ['math.prime_factors@1.0.0']"
    assert "'factors': [2, 2, 2, 3, 3, 5]" in lines[1]
    assert lines[-1] == "360 = 2 × 2 × 2 × 3 × 3 × 5."


def test_a_recording_for_another_search_tool_says_which_to_replay() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "anthropic_agent.py"),
            "--search",
            "regex",
            "--replay",
            str(ROOT / "examples" / "recorded" / "anthropic.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "anthropic_regex.json" in done.stderr
