"""Threads that work for an event loop yield to it (``runtime.threads.yield_to_loop``): a
runner told so runs its tasks under ``SCHED_BATCH``, one not told leaves them alone, the
thread that submits keeps its policy, and a tool's worker process started from such a
thread runs under the ordinary policy again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime.threads import ThreadRunner, yield_to_loop

pytestmark = pytest.mark.skipif(
    not hasattr(os, "SCHED_BATCH"), reason="scheduling policies are Linux's"
)


def policy() -> int:
    return os.sched_getscheduler(0)


def on_a_thread(fn: Any) -> Any:
    """``fn()`` on a new thread (its policy is its own); what it returned."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(30)
    return out[0]


def test_a_runner_told_to_yield_runs_its_tasks_under_batch() -> None:
    told, plain = ThreadRunner(), ThreadRunner()
    told.yields_to_loop = True
    try:
        assert told.submit(policy).result(10) == os.SCHED_BATCH
        assert told.submit(policy).result(10) == os.SCHED_BATCH
        assert plain.submit(policy).result(10) == os.SCHED_OTHER
        assert policy() == os.SCHED_OTHER  # the submitting thread keeps its own
    finally:
        told.close()
        plain.close()


def test_a_thread_yields_once_and_keeps_a_policy_it_did_not_get_from_us() -> None:
    def twice() -> tuple[int, int]:
        yield_to_loop()
        first = policy()
        yield_to_loop()
        return first, policy()

    assert on_a_thread(twice) == (os.SCHED_BATCH, os.SCHED_BATCH)

    def idle_first() -> int:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        yield_to_loop()  # only the ordinary policy is changed
        return policy()

    assert on_a_thread(idle_first) == os.SCHED_IDLE


def test_a_worker_process_started_from_a_yielding_thread_runs_as_usual(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.direct_tools"))

    def from_a_yielding_thread() -> tuple[int, int]:
        yield_to_loop()
        child = subprocess.run(  # what any process started here inherits
            [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
            capture_output=True,
            text=True,
            check=True,
        )
        with Catalog(path, isolation="process") as catalog:
            result = catalog.call("direct.scheduling")
        assert result.success, result
        return int(child.stdout), result.data

    inherited, worker = on_a_thread(from_a_yielding_thread)
    assert inherited == os.SCHED_BATCH and worker == os.SCHED_OTHER
