"""Reindex on every core: worker processes encode, the parent checks and stores in order."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.errors import EmbeddingError
from toolcat.search import batch_encoding
from toolcat.search.embeddings import RETRIEVER, embedder

pytest.importorskip("onnxruntime")


def vectors(path: Path) -> dict[str, bytes]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT content_hash, vector FROM embeddings").fetchall())


def registered(path: Path) -> Path:
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return path


def test_workers_store_what_one_process_makes_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    np = pytest.importorskip("numpy")
    alone, pooled = registered(tmp_path / "alone.db"), registered(tmp_path / "pooled.db")
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "0")
    with Catalog(alone) as catalog:
        catalog.reindex(batch_size=8)
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "2")
    seen: list[tuple[int, int]] = []
    with Catalog(pooled) as catalog:
        report = catalog.reindex(batch_size=8, progress=lambda d, t: seen.append((d, t)))
    assert report.embedded == 38
    assert seen == [(8, 38), (14, 38), (22, 38), (30, 38), (38, 38)]  # last batch: 6
    one, many = vectors(alone), vectors(pooled)
    assert one.keys() == many.keys() and len(one) == 38
    for key, blob in one.items():
        assert np.abs(np.frombuffer(blob, "<f4") - np.frombuffer(many[key], "<f4")).max() < 1e-5


def test_small_jobs_stay_in_process_and_the_setting_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOOLCAT_REINDEX_WORKERS", raising=False)
    assert batch_encoding.workers_wanted(batch_encoding.POOL_MIN_TEXTS - 1) == 0
    assert batch_encoding.workers_wanted(10**6) == (
        batch_encoding.cores() if batch_encoding.cores() > 1 else 0
    )
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "lots")
    with pytest.raises(EmbeddingError, match="TOOLCAT_REINDEX_WORKERS must be a whole number"):
        batch_encoding.workers_wanted(10)


@pytest.fixture(scope="module")
def pool() -> Any:
    fast = embedder(RETRIEVER).document_encoder()
    assert fast is not None
    started = batch_encoding.WorkerPool(fast.export, 1, fast.dimension)
    yield started
    started.close()


def answer(pool: Any, header: dict[str, Any], payload: bytes) -> Any:
    """Feed ``pool`` a worker answer through a real pipe, as a worker would write it."""
    return answer_raw(pool, json.dumps(header).encode() + b"\n" + payload)


def answer_raw(pool: Any, written: bytes) -> Any:
    """Feed ``pool`` whatever bytes a worker wrote, through a real pipe."""
    read, write = os.pipe()
    os.write(write, written)
    os.close(write)
    real = pool._workers[0]
    fake = type(
        "Worker",
        (),
        {"stdout": os.fdopen(read, "rb"), "returncode": None, "wait": lambda self, timeout: 0},
    )()
    pool._workers[0] = fake
    try:
        return pool._answer(0, ["a", "b"])
    finally:
        fake.stdout.close()
        pool._workers[0] = real


def children() -> set[int]:
    """This process's child processes."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


def unit(rows: int, width: int = 384) -> bytes:
    np = pytest.importorskip("numpy")
    matrix = np.ones((rows, width), dtype="<f4") / np.sqrt(width)
    return bytes(matrix.astype("<f4").tobytes())


@pytest.mark.parametrize(
    ("header", "payload", "said"),
    [
        ({"keys": ["a", "c"]}, unit(2), "for other tools"),
        ({"digest": "0" * 16}, unit(2), "another graph"),
        ({"rows": 3}, unit(3), "3x384 vectors for 2 texts"),
        ({"width": 128}, unit(2, 128), "2x128 vectors"),
        ({}, b"\x00\x00\xc0\x7f" * 768, "not finite"),
        ({}, b"\x00\x00\x80\x3f" * 768, "not of unit length"),
        ({"rows": "two"}, unit(2), "unreadable header"),
    ],
    ids=["keys", "graph", "count", "width", "nan", "length", "header"],
)
def test_a_worker_answer_is_checked_before_it_is_stored(
    pool: Any, header: dict[str, Any], payload: bytes, said: str
) -> None:
    good = {"keys": ["a", "b"], "digest": pool.export.digest, "rows": 2, "width": 384}
    assert answer(pool, good, unit(2)).shape == (2, 384)
    with pytest.raises(EmbeddingError, match=said) as caught:
        answer(pool, {**good, **header}, payload)
    assert "\n" not in str(caught.value)


def test_a_torn_answer_is_a_one_line_failure(pool: Any) -> None:
    good = {"keys": ["a", "b"], "digest": pool.export.digest, "rows": 2, "width": 384}
    with pytest.raises(EmbeddingError, match="stopped mid-answer"):
        answer(pool, good, unit(2)[:1000])


def test_a_killed_worker_keeps_what_was_stored_and_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = registered(tmp_path / "catalog.db")
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "2")
    stored: list[int] = []
    before = children()

    def kill_workers(done: int, total: int) -> None:
        if not stored:
            for pid in children() - before:  # the workers
                os.kill(pid, signal.SIGKILL)
        stored.append(done)

    with Catalog(path) as catalog:
        with pytest.raises(EmbeddingError, match="a reindex worker failed") as caught:
            catalog.reindex(batch_size=4, progress=kill_workers)
        assert "\n" not in str(caught.value) and "run `toolcat reindex` again" in str(caught.value)
        assert catalog.status()["coverage"]["embedding"]["indexed"] == stored[-1] < 38
        assert catalog.reindex().embedded == 38 - stored[-1]


def test_ctrl_c_stops_the_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = registered(tmp_path / "catalog.db")
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "2")
    pids: set[int] = set()
    before = children()

    def interrupt(done: int, total: int) -> None:
        pids.update(children() - before)
        raise KeyboardInterrupt

    with Catalog(path) as catalog:
        with pytest.raises(KeyboardInterrupt):
            catalog.reindex(batch_size=4, progress=interrupt)
        assert catalog.status()["coverage"]["embedding"]["indexed"] == 4
    assert len(pids) == 2
    for pid in pids:  # stopped and reaped: gone from the process table
        assert not Path(f"/proc/{pid}").exists()


def test_batches_run_shortest_and_longest_in_turn() -> None:
    from toolcat.search.reindex import _spread

    batches = [[str(i)] for i in range(5)]
    assert _spread(batches) == [["0"], ["4"], ["1"], ["3"], ["2"]]
    assert _spread([]) == [] and _spread([["a"]]) == [["a"]]


@pytest.mark.parametrize(
    "line",
    [
        b'{"keys": ["a", "b"], "digest": "d", "rows": Infinity, "width": 384}\n',
        b'{"keys": ["a", "b"], "digest": "d", "rows": 1e999, "width": 384}\n',
        b"[" * 5_000 + b"\n",  # within a pipe buffer: written before it is read
    ],
    ids=["infinite count", "huge float", "deeply nested"],
)
def test_a_header_that_breaks_the_parser_is_a_one_line_failure(pool: Any, line: bytes) -> None:
    """Not a traceback: ``int(inf)`` raises OverflowError, deep nesting RecursionError."""
    with pytest.raises(EmbeddingError, match="unreadable header"):
        answer_raw(pool, line)


def test_a_library_that_prints_to_stdout_in_a_worker_garbles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a worker's libraries write to stdout (here: at onnxruntime's import, at the
    file descriptor, as C code would) goes to stderr; the answers stay intact."""
    path = registered(tmp_path / "catalog.db")
    chatty = tmp_path / "chatty"
    chatty.mkdir()
    (chatty / "sitecustomize.py").write_text(
        "import os, sys\n"
        "def hook(event, args):\n"
        "    if event == 'import' and args[0] == 'onnxruntime':\n"
        "        os.write(1, b'onnxruntime says hello\\n')\n"
        "sys.addaudithook(hook)\n"
    )
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(chatty), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "2")
    with Catalog(path) as catalog:
        assert catalog.reindex(batch_size=8).embedded == 38


def test_a_worker_count_past_the_cores_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TOOLCAT_REINDEX_WORKERS=100000`` does not start 100,000 model processes."""
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "100000")
    cap = batch_encoding.MAX_WORKERS_PER_CORE * batch_encoding.cores()
    assert batch_encoding.workers_wanted(10**6) == cap


def state(pid: int) -> str | None:
    """A process's state letter, None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


STOPPED_WORKERS = """
import os, signal, sys
from pathlib import Path
from toolcat import Catalog

def children():
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found

def stop_workers(done, total):
    if done == 4:  # the workers hang: the next answer never comes
        for pid in children():
            os.kill(pid, signal.SIGSTOP)
        print(*children(), flush=True)

with Catalog(sys.argv[1]) as catalog:
    catalog.reindex(batch_size=4, progress=stop_workers)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_killing_a_reindex_whose_workers_hang_kills_the_workers(tmp_path: Path) -> None:
    """The parent waits for a hung worker (a batch may take long on a loaded machine), but
    a ``kill`` of the parent takes its workers along: none is left blocked for ever."""
    import subprocess
    import sys

    path = registered(tmp_path / "catalog.db")
    env = {**os.environ, "TOOLCAT_REINDEX_WORKERS": "2"}
    parent = subprocess.Popen(
        [sys.executable, "-c", STOPPED_WORKERS, str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    for _ in range(50):  # SIGSTOP lands when the kernel next schedules them
        if all(state(p) == "T" for p in pids):
            break
        time.sleep(0.1)
    assert len(pids) == 2 and all(state(p) == "T" for p in pids)
    parent.terminate()
    parent.wait(10)
    parent.stdout.close()
    for _ in range(50):
        if all(state(p) in (None, "Z") for p in pids):
            break
        time.sleep(0.1)
    left = {p: state(p) for p in pids if state(p) not in (None, "Z")}
    for pid in left:  # do not leave them behind whatever happens
        os.kill(pid, signal.SIGKILL)
    assert left == {}


def test_texts_sorted_by_tokens_get_the_vectors_of_unsorted_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    np = pytest.importorskip("numpy")
    from toolcat.search import reindex as reindexing

    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "0")
    unsorted, tokens = registered(tmp_path / "unsorted.db"), registered(tmp_path / "tokens.db")
    real = reindexing.by_tokens
    monkeypatch.setattr(reindexing, "by_tokens", lambda encoder, texts, order: order)
    with Catalog(unsorted) as catalog:
        catalog.reindex(batch_size=8)
    orders: list[tuple[list[str], list[str]]] = []

    def spied(encoder: Any, texts: dict[str, str], order: list[str]) -> list[str]:
        orders.append((order, real(encoder, texts, order)))
        return orders[-1][1]

    monkeypatch.setattr(reindexing, "by_tokens", spied)
    with Catalog(tokens) as catalog:
        assert catalog.reindex(batch_size=8).embedded == 38
    ((given, ran),) = orders
    assert given != ran  # the order really changed, so the batches did
    plain, sorted_ = vectors(unsorted), vectors(tokens)
    assert plain.keys() == sorted_.keys() and len(plain) == 38
    for key, blob in plain.items():
        a, b = np.frombuffer(blob, "<f4"), np.frombuffer(sorted_[key], "<f4")
        assert float(a @ b) > 1 - 1e-5  # each tool's own vector, wherever its text ran


def test_by_tokens_sorts_by_truncated_token_count_and_keeps_ties_in_order() -> None:
    from toolcat.search.reindex import by_tokens

    encoder = embedder(RETRIEVER)
    tokenizer = encoder.document_encoder().tokenizer  # type: ignore[union-attr]
    texts = {
        "long": "word " * 600,  # past the model's 256 tokens: counted as truncated
        "b": "search files",
        "a": "read a file",
        "mid": "send an email to a colleague with the report attached",
        "empty": "",
    }
    order = ["long", "mid", "b", "a", "empty"]
    ranked = by_tokens(encoder, texts, order, chunk=2)
    counts = [len(tokenizer.encode(texts[h]).ids) for h in ranked]
    assert sorted(ranked) == sorted(order) and counts == sorted(counts)
    assert counts[-1] == 256 and ranked[-1] == "long"
    ties = [h for h in ranked if len(tokenizer.encode(texts[h]).ids) == 4]
    assert ties == [h for h in order if h in ties]  # equal counts keep the order given
    assert by_tokens(object(), texts, order) == order  # no document encoder: unchanged
    assert by_tokens(encoder, texts, ["a"]) == ["a"]


def test_by_tokens_leaves_a_gpu_encoder_its_own_sorting() -> None:
    """A GPU encoder sorts each call's texts by token count itself: nothing is tokenized
    here for it (that cost a tokenization of every text)."""
    from toolcat.search.reindex import by_tokens

    class Untouchable:
        def encode_batch(self, texts: list[str]) -> Any:
            raise AssertionError("tokenized for a GPU encoder")

    class Documents:
        def __init__(self, device: str) -> None:
            self.device, self.tokenizer = device, Untouchable()

    class Encoder:
        def __init__(self, device: str) -> None:
            self.found = Documents(device)

        def document_encoder(self) -> Documents:
            return self.found

    texts = {"long": "word " * 50, "short": "read"}
    assert by_tokens(Encoder("cuda"), texts, ["long", "short"]) == ["long", "short"]
    with pytest.raises(AssertionError, match="tokenized"):
        by_tokens(Encoder("cpu"), texts, ["long", "short"])


def test_a_reindex_of_everything_decodes_each_definition_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh catalog (no producer recorded) lists every tool before the encoder loads and
    again after its vectors are reset: each definition is decoded once all the same."""
    from toolcat.store import reader

    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "0")
    db = registered(tmp_path / "once.db")
    real = reader.decode_definition
    decoded: list[str] = []

    def counted(text: Any, where: str) -> Any:
        decoded.append(where)
        return real(text, where)

    monkeypatch.setattr(reader, "decode_definition", counted)
    with Catalog(db) as catalog:
        assert catalog.reindex(batch_size=8).embedded == 38
    reindexed = [w for w in decoded if w.startswith("hash ")]
    assert len(reindexed) == 38 and len(set(reindexed)) == 38
