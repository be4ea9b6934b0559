"""``pages.patch``: the target ends with the source's bytes whatever it held, writing only
the blocks that differ; the C and the Python give the same answer."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolcat.store import pages

BLOCK = pages.BLOCK


@pytest.fixture(params=["native", "python"])
def native(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "native":
        if pages._pages is None:
            pytest.skip("the C extension was not built")
    else:
        monkeypatch.setattr(pages, "NATIVE", False)
    yield request.param


def patched(tmp_path: Path, source: bytes, target: bytes, size: int | None = None) -> tuple:
    a, b = tmp_path / "source", tmp_path / "target"
    a.write_bytes(source)
    b.write_bytes(target)
    fa, fb = os.open(a, os.O_RDONLY), os.open(b, os.O_RDWR)
    try:
        answer = pages.patch(fa, fb, len(source) if size is None else size)
    finally:
        os.close(fa)
        os.close(fb)
    return answer, b.read_bytes()


def test_the_target_becomes_the_source_whatever_it_held(tmp_path: Path, native: str) -> None:
    rng = random.Random(20261130)
    chunk = pages.CHUNK
    sizes = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17, chunk - 1, chunk, chunk + 5]
    sizes += [2 * chunk + 3 * BLOCK + 9]
    for size in sizes:
        source = rng.randbytes(size)
        for target in (
            b"",  # a fresh file: all written
            source,  # the same: nothing written
            rng.randbytes(size),  # all different
            source + rng.randbytes(3 * BLOCK + 5),  # longer: cut
            source[: size // 2],  # shorter: the rest written
            bytes(size),
        ):
            (copied, written), result = patched(tmp_path, source, target)
            assert result == source and copied == size
            assert 0 <= written <= size
            if target == source:
                assert written == 0


def test_only_the_blocks_that_differ_are_written(tmp_path: Path, native: str) -> None:
    rng = random.Random(7)
    source = bytearray(rng.randbytes(2 * pages.CHUNK + 10 * BLOCK))
    target = bytes(source)
    changed = sorted(rng.sample(range(len(source) // BLOCK), 12))
    for block in changed:
        source[block * BLOCK + 100] ^= 0xFF
    # Two neighbouring blocks differing make one run: still two blocks' bytes.
    source[changed[0] * BLOCK + BLOCK + 1] ^= 0x01
    expected = len({*changed, changed[0] + 1}) * BLOCK
    (copied, written), result = patched(tmp_path, bytes(source), target)
    assert result == bytes(source) and copied == len(source)
    assert written == expected


def test_a_source_that_ends_sooner_cuts_the_target_there(tmp_path: Path, native: str) -> None:
    source = os.urandom(5 * BLOCK + 3)
    (copied, written), result = patched(tmp_path, source, os.urandom(9 * BLOCK), size=8 * BLOCK)
    assert written == len(source)  # every byte differed
    assert copied == len(source) and result == source


def test_the_c_and_the_python_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if pages._pages is None:
        pytest.skip("the C extension was not built")
    rng = random.Random(11)
    for _ in range(30):
        source = rng.randbytes(rng.randrange(0, 6 * BLOCK))
        target = bytearray(source[: rng.randrange(0, len(source) + 1)])
        target += rng.randbytes(rng.randrange(0, 2 * BLOCK))
        for i in rng.sample(range(len(target)), min(len(target), 3)):
            target[i] ^= 0x55
        monkeypatch.setattr(pages, "NATIVE", True)
        native = patched(tmp_path, source, bytes(target))
        monkeypatch.setattr(pages, "NATIVE", False)
        python = patched(tmp_path, source, bytes(target))
        assert native == python and native[1] == source


def test_bad_descriptors_and_sizes_are_errors(tmp_path: Path, native: str) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x" * 10)
    fd = os.open(target, os.O_RDONLY)  # not writable: the write fails
    source = tmp_path / "source"
    source.write_bytes(b"y" * 10)
    fs = os.open(source, os.O_RDONLY)
    try:
        with pytest.raises(OSError):
            pages.patch(fs, fd, 10)
        with pytest.raises(ValueError):
            pages.patch(fs, fd, -1)
    finally:
        os.close(fd)
        os.close(fs)
    with pytest.raises(OSError):
        pages.patch(10_000, 10_001, 10)  # no such descriptors
