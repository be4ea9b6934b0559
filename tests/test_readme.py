"""Every shell and Python example in the README and in docs/*.md runs as written, so the text
cannot drift.

Each ```sh block runs with bash (``set -euo pipefail``) in a fresh workspace that holds the
demo catalog (``catalog.db``, also ``$TOOLCAT_DB``, with ``data/toolkits`` registered), the
sample data and ``../shared`` beside it, with the venv's ``toolcat`` first on ``PATH``.
Set-up lines (``make``, ``source``, ``pip``) are what CI itself runs, so they are skipped here;
a ``serve`` that is still serving after a few seconds has passed. Each ```python block runs
with the venv's Python in the same kind of workspace.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(sh|bash|shell|python)\n(.*?)^```", re.S | re.M)
SETUP_LINE = re.compile(r"^\s*(make|source|\.|pip|python3? -m pip)\b")
# A server (the MCP server, the console) runs until stopped: give it this long to fail, then
# stop it.
SERVE_LINE = re.compile(r"^\s*toolcat\b[^\"']*\s(serve|ui)\b")
SERVE_SECONDS = 6


def examples() -> list[tuple[str, str, int, str]]:
    """(file, language, line number in the file, the block's text) for every example block of
    the README and docs/*.md; the file is named relative to the repository."""
    found = []
    for path in DOCS:
        text = path.read_text()
        name = path.relative_to(ROOT).as_posix()
        for m in BLOCK.finditer(text):
            lang = "python" if m.group(1) == "python" else "sh"
            found.append((name, lang, text[: m.start()].count("\n") + 1, m[2]))
    return found


def runnable(block: str) -> str:
    lines = []
    for line in block.splitlines():
        if SETUP_LINE.match(line):
            continue
        if SERVE_LINE.match(line):
            command = line.split(" #", 1)[0].rstrip()
            line = f"timeout {SERVE_SECONDS} {command} < /dev/null || [ $? -eq 124 ]"
        lines.append(line)
    return "\n".join(lines)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    top = tmp_path_factory.mktemp("readme")
    work = top / "repo"
    work.mkdir()
    shutil.copytree(ROOT / "data", work / "data")
    for name in ("examples", "scripts"):
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name)
    if (ROOT.parent / "shared").exists():
        (top / "shared").symlink_to(ROOT.parent / "shared")
    subprocess.run(
        [toolcat_bin(), "--db", str(work / "catalog.db"), "register", "data/toolkits"],
        cwd=work,
        check=True,
        capture_output=True,
    )
    return work


def toolcat_bin() -> str:
    return str(Path(sys.executable).with_name("toolcat"))


EXAMPLES = examples()


def test_the_readme_has_examples_in_both_languages() -> None:
    in_readme = [lang for name, lang, _, _ in EXAMPLES if name == "README.md"]
    assert in_readme.count("sh") >= 3 and in_readme.count("python") >= 2
    assert sum(lang == "sh" for _, lang, _, _ in EXAMPLES) >= 10
    assert sum(lang == "python" for _, lang, _, _ in EXAMPLES) >= 5


def test_every_docs_file_is_linked_from_the_readme() -> None:
    readme = README.read_text()
    for path in DOCS[1:]:
        assert f"](docs/{path.name})" in readme, f"README does not link docs/{path.name}"


LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")


def test_relative_links_reach_a_file_and_heading() -> None:
    for path in [*DOCS, ROOT / "scripts" / "research" / "README.md"]:
        for m in LINK.finditer(path.read_text()):
            target, fragment = m[1], m[2]
            if target.startswith(("http://", "https://")):
                continue
            linked = (path.parent / target).resolve() if target else path
            assert linked.is_file(), f"{path.name}: link to missing {target}"
            if fragment:
                lines = linked.read_text().splitlines()
                headings = {anchor(line) for line in lines if line.startswith("#")}
                assert fragment in headings, f"{path.name}: no heading #{fragment} in {target}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "lang", "line", "block"),
    EXAMPLES,
    ids=[f"{name}:{line}-{lang}" for name, lang, line, _ in EXAMPLES],
)
def test_example_runs_as_written(
    workspace: Path, name: str, lang: str, line: int, block: str
) -> None:
    script = runnable(block) if lang == "sh" else block
    if not script.strip():
        pytest.skip("set-up only (run by CI itself)")
    case = workspace.parent / f"{name.replace('/', '-')}-line{line}"
    shutil.copytree(workspace, case, symlinks=True)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TOOLCAT_DB": str(case / "catalog.db"),
        "T": "readme-example-token",
    }
    command = (
        [sys.executable, "-c", script]
        if lang == "python"
        else ["bash", "-c", "set -euo pipefail\n" + script]
    )
    result = subprocess.run(
        command,
        cwd=case,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, (
        f"{name} line {line}: exit {result.returncode}\n{script}\n"
        f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
    )
