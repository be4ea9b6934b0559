from __future__ import annotations

import multiprocessing
from pathlib import Path

from tests.helpers import toolkit_data
from toolcat import Catalog, Toolkit


def _register(db: str, name: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    with Catalog(db) as catalog:
        toolkits = [Toolkit.model_validate(toolkit_data(f"{name}{i}")) for i in range(20)]
        barrier.wait()
        for toolkit in toolkits:
            catalog.register(toolkit)


def test_two_processes_registering_at_once_both_succeed(db_path: Path) -> None:
    Catalog(db_path).close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_register, args=(str(db_path), n, barrier)) for n in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    with Catalog(db_path) as catalog:
        assert catalog.revision == 40
        assert len(catalog.toolkits()) == 40
        assert len(catalog.list(include_deferred=True, limit=1000).tools) == 80


def test_a_reader_sees_one_revision_while_a_writer_commits(db_path: Path) -> None:
    with Catalog(db_path) as writer, Catalog(db_path) as reader:
        writer.register(Toolkit.model_validate(toolkit_data()))
        page = reader.list(include_deferred=True)
        writer.register(Toolkit.model_validate(toolkit_data("other")))
        assert page.revision == 1 and len(page.tools) == 2
        assert reader.list(include_deferred=True).revision == 2
