"""The server's readers run on threads of their own, one a reader at most: a request waits
for a free one, a caller cancelled while it waits drops its read, one cancelled while its
read runs leaves the read to finish and give its reader back."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from toolcat import Catalog
from toolcat.server.mcp import Readers


def test_reads_wait_for_a_free_thread_and_cancelled_ones_give_their_reader_back(
    sample_path: Path,
) -> None:
    with Catalog(sample_path) as catalog:
        readers = Readers(catalog, 1)
        ran: list[str] = []
        threads: set[int] = set()

        def read(name: str, seconds: float) -> str:
            def fn(reader: Catalog) -> str:
                threads.add(threading.get_ident())
                time.sleep(seconds)
                reader.list(limit=1)
                ran.append(name)
                return name

            return fn

        async def main() -> None:
            slow = asyncio.ensure_future(readers.run(read("slow", 0.4)))
            waiting = asyncio.ensure_future(readers.run(read("waiting", 0)))
            await asyncio.sleep(0.1)
            assert not waiting.done()  # one reader, one thread: it waits
            waiting.cancel()
            slow.cancel()
            for task in (slow, waiting):
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert await readers.run(read("next", 0)) == "next"

        try:
            asyncio.run(main())
        finally:
            readers.close()
    assert ran == ["slow", "next"]  # the cancelled read under way finished; the other never ran
    assert len(threads) == 1 and threading.get_ident() not in threads
