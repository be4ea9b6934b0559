"""Attack 68: TOOLCAT_REINDEX_DEVICE=bf16 (the torch module on the CPU at bfloat16), torch on
the CPU encoding in process, and the probe that spares a principal without uses the per-hit
join (``reader.principal_uses``).

Tests marked "Failed before the fix" failed on the code as of 099d447 (fixed since: a refused
device is refused by every reindex of a process, also with nothing to embed, and its value is
cut short in the error); the others held and guard what was tried."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS, stable_id
from toolcat import Catalog
from toolcat.errors import EmbeddingError
from toolcat.search import embeddings
from toolcat.search.encoders import device
from toolcat.store import reader


def _indexed(db: Path) -> int:
    with Catalog(db) as catalog:
        return int(catalog.status()["coverage"]["embedding"]["indexed"])


def _attempts(db: Path, says: str) -> list[str]:
    """What two reindexes in a row, in this process, did: "refused" (an EmbeddingError
    naming ``says``, the catalog unchanged) or what they stored with which encoder."""
    outcomes = []
    for _ in range(2):
        with Catalog(db) as catalog:
            try:
                report = catalog.reindex()
            except EmbeddingError as e:
                assert says in str(e) and "\n" not in str(e)
                assert _indexed(db) == 0
                outcomes.append("refused")
            else:
                outcomes.append(f"stored {report.embedded} with {report.device}")
    return outcomes


# --- TOOLCAT_REINDEX_DEVICE -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["tpu", "bf16x", "ｂｆ16", "bf16\u200c", "x" * 5000])
def test_a_bad_device_is_refused_by_every_reindex_of_a_process(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed before the fix (bug, silent no-op). ``Embedder.document_encoder`` marks the
    document encoder checked before ``device.gpu_encoder`` raises: the first reindex of a
    process refuses the bad value, the second (the embedder is cached per model for the
    process: the console's reindex button, a library caller retrying) encodes with
    onnxruntime and succeeds, the bad setting ignored without a word."""
    pytest.importorskip("onnxruntime")
    db = tmp_path / "c.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    monkeypatch.setenv(device.ENV, value)
    embeddings._embedders.clear()
    assert _attempts(db, device.ENV) == ["refused", "refused"]


def test_bf16_that_cannot_load_is_refused_by_every_reindex_of_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed before the fix (bug, silent no-op): bf16 asked for where torch cannot be imported.
    The first reindex says the torch encoder cannot load (one line, nothing stored); the
    second in the same process stores onnxruntime's vectors and reports
    "cpu (onnxruntime)", though bf16 is still asked for."""
    pytest.importorskip("onnxruntime")
    db = tmp_path / "c.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch: ImportError
    monkeypatch.setenv(device.ENV, "bf16")
    embeddings._embedders.clear()
    try:
        assert _attempts(db, "torch") == ["refused", "refused"]
    finally:
        embeddings._embedders.clear()


def test_a_bad_device_is_refused_even_when_nothing_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed before the fix (nit, silent no-op): with every tool embedded and the export
    current, no encoder is loaded, so TOOLCAT_REINDEX_DEVICE is never read: any value,
    misspelt or not, passes (exit 0) until the first tool changes, then fails."""
    pytest.importorskip("onnxruntime")
    db = tmp_path / "c.db"
    monkeypatch.setenv(device.ENV, "cpu")
    embeddings._embedders.clear()
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        assert catalog.reindex().embedded > 0
    monkeypatch.setenv(device.ENV, "bf61")  # a typo of bf16
    embeddings._embedders.clear()
    with Catalog(db) as catalog, pytest.raises(EmbeddingError, match=device.ENV):
        catalog.reindex()


@pytest.mark.parametrize("value", ["BF16", " bf16 ", "\tBf16\n"])
def test_device_case_and_spacing_are_read_as_bf16(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: case and surrounding whitespace are ignored."""
    monkeypatch.setenv(device.ENV, value)
    assert device.choice() == "bf16"


@pytest.mark.parametrize("value", ["ｂｆ16", "bf16\u200c", "ВF16", "bf16\x1b[31m", "bf 16"])
def test_device_look_alikes_are_one_line_errors_without_raw_controls(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: look-alikes are refused, naming the variable, the value escaped (repr)."""
    monkeypatch.setenv(device.ENV, value)
    with pytest.raises(EmbeddingError) as raised:
        device.choice()
    text = str(raised.value)
    assert text.startswith(device.ENV) and "\n" not in text and "\x1b" not in text


def test_a_very_long_device_value_is_not_echoed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before the fix (nit, leaks in words / unbounded output): the error repeats the
    whole value; 100,000 characters set in the environment make a 100 KB error line on the
    admin's terminal (HOSTILE.md: an error names the field, not the value)."""
    monkeypatch.setenv(device.ENV, "x" * 100_000)
    with pytest.raises(EmbeddingError) as raised:
        device.choice()
    assert len(str(raised.value)) < 500


# --- principal_uses' probe ------------------------------------------------------------------


def _ids(catalog: Catalog, query: str) -> list[int]:
    return [
        row_id
        for row_id, _ in catalog._search.bm25(
            catalog._conn, query, reader.Filters(), 10, reader.revision(catalog._conn)
        )
    ]


def test_principal_uses_probe_matches_the_join_exactly(sample_catalog: Catalog) -> None:
    """Held: the probe and the join compare ``principal`` the same way: case, trailing
    spaces, NUL, a huge name and the catalog's own caller ("") find only their own uses."""
    conn = sample_catalog._conn
    (timezone,) = conn.execute(
        "SELECT id FROM tools WHERE toolkit = 'time' AND name = 'convert_timezone'"
    ).fetchone()
    ids = [*_ids(sample_catalog, "delete the file report.txt"), timezone]
    sample_catalog.record_uses([("convert a time zone", "time.convert_timezone")], principal="Bob")
    for other in ("bob", "Bob ", " Bob", "BOB", "Bob\x00", "Bob\x00x", "", "B" * 100_000):
        assert reader.principal_uses(conn, other, ids) == {}, repr(other[:10])
    assert reader.principal_uses(conn, "Bob", ids) == {timezone: ["convert a time zone"]}
    # "" records its own; a principal's uses of other tools only give nothing for these hits
    sample_catalog.record_uses([("zone shift", "time.convert_timezone")])
    assert reader.principal_uses(conn, "", ids) == {timezone: ["zone shift"]}
    assert reader.principal_uses(conn, "Bob", ids[:-1]) == {}
    # learning off, then on again: nothing while off, the same uses after
    sample_catalog.learning = False
    assert reader.principal_uses(conn, "Bob", ids) == {}
    sample_catalog.learning = True
    assert reader.principal_uses(conn, "Bob", ids) == {timezone: ["convert a time zone"]}


def test_principal_uses_probe_uses_the_index(sample_catalog: Catalog) -> None:
    """Held: the probe is a search of ``usage_tool`` (principal first), never a scan, with
    thousands of uses recorded for one principal."""
    conn = sample_catalog._conn
    sample_catalog.record_uses(
        [(f"query number {i}", "time.convert_timezone") for i in range(2000)], principal="heavy"
    )
    plan = " ".join(
        str(row[-1])
        for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT 1 FROM usage WHERE principal = ? LIMIT 1", ("nobody",)
        )
    )
    assert "USING COVERING INDEX usage_tool" in plan and "SCAN" not in plan


def test_principal_uses_on_forged_usage_rows(tmp_path: Path) -> None:
    """Held: a catalog file another program wrote, with usage rows whose principal is not
    text (an integer, a blob) and the index dropped: a text principal finds nothing of
    theirs, and nothing raises."""
    db = tmp_path / "c.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.record_uses([("convert a time zone", "time.convert_timezone")], principal="7")
    raw = sqlite3.connect(db)
    raw.execute(
        "INSERT INTO usage (principal, toolkit, name, query, query_key, recorded_at) "
        "VALUES (?, 'time', 'convert_timezone', 'forged', 'forged', 'x')",
        (b"7",),
    )
    raw.execute("DROP INDEX usage_tool")
    raw.commit()
    raw.close()
    with Catalog(db) as catalog:
        conn = catalog._conn
        (timezone,) = conn.execute(
            "SELECT id FROM tools WHERE toolkit = 'time' AND name = 'convert_timezone'"
        ).fetchone()
        assert reader.principal_uses(conn, "7", [timezone]) == {timezone: ["convert a time zone"]}
        assert reader.principal_uses(conn, "8", [timezone]) == {}


# --- tests/helpers.stable_id -----------------------------------------------------------------


def test_stable_id_drops_addresses_of_every_case() -> None:
    """Held for CPython's reprs (``at 0x…``): functions, objects, partials, nested in lists."""
    import functools

    class Thing:
        pass

    for value in (Thing(), lambda: 0, functools.partial(print, 1), [object(), object()]):
        assert "0x" not in stable_id(value), stable_id(value)


def test_bf16_reindex_failing_midway_loses_nothing_and_onnxruntime_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: a bf16 reindex whose encoder fails on its third batch keeps the batches it
    stored (same producer), and a default reindex after it embeds only the rest; search
    works on the mixed vectors."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    pytest.importorskip("torch")
    from toolcat.search.encoders.torch import TorchEncoder

    db = tmp_path / "c.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    monkeypatch.setenv(device.ENV, "bf16")
    embeddings._embedders.clear()
    calls = {"n": 0}
    real = TorchEncoder.encode

    def failing(self: TorchEncoder, texts: list[str]) -> object:
        calls["n"] += 1
        if calls["n"] == 5:  # two self-check encodes, then the reindex's third batch
            raise RuntimeError("boom")
        return real(self, texts)

    monkeypatch.setattr(TorchEncoder, "encode", failing)
    with Catalog(db) as catalog, pytest.raises(RuntimeError):
        catalog.reindex(batch_size=8)
    kept = _indexed(db)
    assert 0 < kept < 38  # the first two batches (spread: a short one, the long one)
    monkeypatch.setenv(device.ENV, "cpu")
    embeddings._embedders.clear()
    with Catalog(db) as catalog:
        report = catalog.reindex()
        assert report.device == "cpu (onnxruntime)"
        assert report.skipped == kept and report.embedded == 38 - kept
        hits = catalog.search("turn fahrenheit into celsius", mode="embedding").hits
        assert hits and hits[0].tool.name == "convert_units"
    embeddings._embedders.clear()
