"""attack52: the scheduling policy a process was started under reaches its tool workers
(``toolcat serve``'s own ``SCHED_BATCH`` does not); a call's artifact folder, named on its
first artifact, is still one per call, shared by all of that call's artifacts."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures import attack52_tools
from tests.helpers import ROOT
from toolcat import Catalog, Tool, Toolkit, ToolResult
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import artifacts
from toolcat.runtime.events import EventLog

BIG = "x" * (artifacts.INLINE_BYTES + 1)  # written to the call's folder

STARTED_UNDER_BATCH = """
import os, sys
os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # as `chrt --batch 0` starts it
from toolcat import Catalog
with Catalog(sys.argv[1], isolation="process") as catalog:
    result = catalog.call("direct.scheduling")
assert result.success, result
print(result.data)
"""


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="scheduling policies are Linux's")
def test_a_worker_keeps_the_policy_its_process_was_started_under(tmp_path: Path) -> None:
    """An admin's ``chrt --batch toolcat call ...``: the tool's worker process runs under
    SCHED_BATCH too; only a policy toolcat set itself is left out of its children."""
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.direct_tools"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", STARTED_UNDER_BATCH, str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == os.SCHED_BATCH


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "artifacts"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("TOOLCAT_ARTIFACTS", str(folder))
    monkeypatch.delenv("TOOLCAT_ARTIFACTS_TTL", raising=False)
    monkeypatch.delenv("TOOLCAT_ARTIFACTS_MAX_BYTES", raising=False)
    return folder


def folders_of(log: EventLog) -> set[Path]:
    return {Path(e.uri.removeprefix("file://")).parent for e in log.events if e.uri}


def test_a_call_without_large_artifacts_makes_no_folder(root: Path) -> None:
    log = EventLog(None, time.perf_counter())
    log({"kind": "artifact", "name": "small.txt", "text": "small"})
    log.close()
    assert list(root.iterdir()) == []


def test_artifacts_of_one_call_share_one_folder_and_calls_do_not(root: Path) -> None:
    """Named on the first artifact: the second of the call (even from another of the tool's
    threads at once) goes beside it, the next call gets a folder of its own."""
    first, second = EventLog(None, time.perf_counter()), EventLog(None, time.perf_counter())
    barrier = threading.Barrier(4)

    def report(log: EventLog, name: str) -> None:
        barrier.wait()
        log({"kind": "artifact", "name": name, "text": BIG})

    threads = [
        threading.Thread(target=report, args=(log, name))
        for log in (first, second)
        for name in ("a.txt", "b.txt")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    (one,), (other,) = folders_of(first), folders_of(second)
    assert one != other
    assert {p.name for p in root.iterdir()} == {one.name, other.name}
    assert all(artifacts.CALL_FOLDER.fullmatch(p.name) for p in (one, other))
    assert sorted(p.name for p in one.iterdir()) == ["a.txt", "b.txt"]


@pytest.fixture
def classes_db(tmp_path: Path) -> Path:
    path = tmp_path / "classes.db"
    with Catalog(path) as catalog:
        catalog.register(
            Toolkit(
                name="classes",
                version="1.0.0",
                module="tests.fixtures.attack52_tools",
                tools=[
                    Tool(
                        name=name,
                        description="A class whose metaclass compares by its own code.",
                        implementation=f"tests.fixtures.attack52_tools:{name}",
                    )
                    for name in ("Counted", "Greets")
                ],
            )
        )
    return path


@pytest.mark.parametrize(("name", "data"), [("Counted", 0), ("Greets", "Hello, Ada!")])
def test_routing_runs_no_metaclass_code_on_the_loop(
    classes_db: Path, name: str, data: object
) -> None:
    """``acall`` tells a pydantic model class from other callables on the caller's loop:
    ``BaseModel in`` the class's MRO compared each class there with ``==``, the tool's
    metaclass's own ``__eq__``."""
    with Catalog(classes_db) as catalog:
        tool = catalog.get(f"classes.{name}")
        assert catalog.call(tool, {}).data == data  # imported: acall routes it in memory
        attack52_tools.COMPARED.clear()

        async def called() -> tuple[ToolResult, int]:
            return await catalog.acall(tool, {}), threading.get_ident()

        result, loop_thread = asyncio.run(called())
    assert result.success and result.data == data
    assert loop_thread not in attack52_tools.COMPARED
