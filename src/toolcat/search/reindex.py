"""Reindexing: bring the derived indexes (vectors, FTS5) up to date with the stored tools,
and report how far they cover the catalog."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ..errors import CatalogDamagedError, InvalidQueryError
from ..models import ReindexReport
from ..store import counts, reader, writer
from ..store.counts import index_totals
from . import ann, batch_encoding
from .embeddings import embedder, stored_embedding_text, to_blob
from .encoders import device
from .engine import SearchEngine, embeddings_installed


def reindex(
    conn: sqlite3.Connection,
    lock: AbstractContextManager[Any],
    engine: SearchEngine,
    *,
    model: str | None = None,
    batch_size: int = 64,
    full: bool = False,
    progress: Callable[[int, int], None] | None = None,
    stage: Callable[[str], None] | None = None,
) -> ReindexReport:
    """Embed what has no vector for the model, batch by batch, then prune; see
    ``Catalog.reindex``. Every write happens under ``lock``, one batch a transaction.

    The catalog records what made its vectors (the model id and ``Embedder.producer``, the
    export's digest): when that changed (a new export, one found damaged and made again, or
    vectors of unknown origin from before it was recorded), the model's vectors are dropped
    (once the encoder has loaded) and every tool is embedded again; an interrupted run
    resumes from what the new encoder made."""
    if batch_size < 1:
        raise InvalidQueryError("batch_size must be at least 1")
    # A misspelt TOOLCAT_REINDEX_DEVICE or TOOLCAT_REINDEX_WORKERS is refused even with
    # nothing to embed, and before vectors of another producer are dropped.
    device.choice()
    batch_encoding.workers_wanted(0)
    started = time.perf_counter()
    with lock:
        recorded, model_id = engine.models(conn, model)
        made_by = reader.meta(conn, "embedding_producer")
    producer = embedder(model_id).producer() if embeddings_installed() else None
    redo = producer is not None and made_by != f"{model_id} {producer}"
    with lock:
        stale = reader.stale_vectors(conn, model_id, everything=full or redo)
        active = counts.active_tools(conn)  # kept count: no scan of the tools
        dimension = reader.meta(conn, "embedding_dim") if recorded == model_id else None
    # Shortest texts first: batches of like lengths pad little (measured 2.3x the tools/s of
    # catalog order on the benchmark texts with sentence-transformers).
    texts = _texts(stale)
    order = sorted(texts, key=lambda h: len(texts[h]))
    encoder = None
    export_seconds = 0.0
    if stale or model_id != recorded or _needs_export(model_id) or redo:
        # Load the model before changing anything: a model that cannot load loses nothing.
        # Export it first, so that documents too are encoded by the export; once one is
        # made, a reindex neither imports torch nor loads the model.
        exporting = time.perf_counter()
        encoder = _exported(model_id, stage)
        dimension = encoder.dimension
        export_seconds = time.perf_counter() - exporting
        made = f"{model_id} {encoder.producer()}"
        if made != made_by:  # vectors of another encoder: dropped, all embedded again
            with lock:
                writer.reset_vectors(conn, model_id, made)
                stale = reader.stale_vectors(conn, model_id, everything=full)
            texts = _texts(stale, texts)
            order = sorted(texts, key=lambda h: len(texts[h]))
    fts_rows = 0
    if full:
        with lock:
            fts_rows = writer.rebuild_fts(conn)
    done = 0
    # what encoded the documents: the job's encoder, else the model's (nothing to embed)
    where = encoder.document_device() if encoder is not None else ""
    if order:
        assert encoder is not None
        order = by_tokens(encoder, texts, order)
        step = encoder.texts_per_call(batch_size)  # many more on a GPU
        batches = (
            (keys, [texts[h] for h in keys])
            for keys in _spread([order[i : i + step] for i in range(0, len(order), step)])
        )
        # Encoding runs ahead on every core while each batch is stored, in order, one
        # transaction a batch (batch_encoding: checked before it is trusted).
        batch_encoder = batch_encoding.encoder_for(encoder, len(order), batch_size)
        where = batch_encoder.device
        try:
            for keys, vectors in batch_encoder.encode_batches(batches):
                rows = [(h, to_blob(v)) for h, v in zip(keys, vectors, strict=True)]
                with lock:
                    writer.store_vectors(conn, model_id, rows)
                done += len(keys)
                if progress is not None:
                    progress(done, len(stale))
        finally:
            batch_encoder.close()
    _embed_usage(conn, lock, model_id, encoder, batch_size)
    with lock:
        writer.fold_usage(conn)
    with lock:
        if model_id != recorded or dimension != reader.meta(conn, "embedding_dim"):
            writer.set_meta(conn, {"embedding_model": model_id, "embedding_dim": dimension})
        # Only now that the new vectors are in: drop other models' and orphans.
        removed = writer.prune_vectors(conn, model_id)
    saving = time.perf_counter()
    _save_shortlist(conn, lock, engine, model_id)
    shortlist_seconds = time.perf_counter() - saving
    seconds = time.perf_counter() - started
    # tools/s is about embedding, not the export or the shortlist
    embedding = seconds - export_seconds - shortlist_seconds
    return ReindexReport(
        model=model_id,
        dimension=int(dimension) if dimension is not None else None,
        embedded=len(stale),
        skipped=active - len(stale),
        removed=removed,
        fts_rebuilt=fts_rows,
        seconds=round(seconds, 3),
        tools_per_second=round(len(stale) / embedding, 1) if stale and embedding > 0 else 0.0,
        export_seconds=round(export_seconds, 3),
        shortlist_seconds=round(shortlist_seconds, 3),
        device=where,
    )


def _texts(stale: list[tuple[str, str]], known: dict[str, str] | None = None) -> dict[str, str]:
    """Each stale tool's embedding text by content hash; those in ``known`` are not decoded
    again (a catalog re-embedded whole after its producer changed lists the same tools twice:
    decoding them twice was ~18 s of a 100k-tool reindex around the encoder)."""
    known = known or {}
    return {h: known[h] if h in known else _text(h, d) for h, d in stale}


def _text(content_hash: str, stored: str) -> str:
    definition = reader.decode_definition(stored, f"hash {content_hash}")
    # Readers take a tool's name from its row, so decoding lets an absent or null one by:
    # the text needs it.
    if type(definition.get("name")) is not str:
        raise CatalogDamagedError(f"tool 'hash {content_hash}': its definition has no 'name'")
    return stored_embedding_text(definition)


def _save_shortlist(
    conn: sqlite3.Connection,
    lock: AbstractContextManager[Any],
    engine: SearchEngine,
    model_id: str,
) -> None:
    """From ``ann.ANN_FROM`` tool vectors on (with the ``ann`` extra), load the reindexed
    vectors and save their shortlist beside the catalog, unless one is stamped for this
    revision already, so that a serving process loads it instead of answering from the
    exact scan while it builds one (at 1M tools 19 s, against 1 s for a reindex with
    nothing to do: docs/benchmarks.md, "Compact vectors and the ANN at 1M")."""
    path = getattr(conn, "path", "") or ""
    if not path or not ann.installed():
        return
    vectors = engine.vectors
    with lock:
        rows, revision = counts.vectors(conn, model_id), reader.revision(conn)
        if rows < ann.ANN_FROM or ann.saved_for(path, revision, model_id, rows):
            return
        with vectors.lock:
            vectors.read_whole_next()  # not brought forward: what is saved is for any process
            vectors.refresh(conn, revision, model_id, path)
    vectors.wait_shortlist()


# Texts tokenized at a time to count their tokens (their encodings are dropped at once).
COUNT_CHUNK = 10_000


def by_tokens(
    encoder: Any, texts: dict[str, str], order: list[str], chunk: int = COUNT_CHUNK
) -> list[str]:
    """``order`` sorted by each text's token count as the document encoder truncates it
    (ties keep ``order``), when that encoder has a tokenizer and runs on the CPU; else
    ``order``.

    Batches cut from characters-sorted texts ran 1.080x their tokens in token slots on
    the generator's 5,000 tools, against 1.006x cut from token-sorted ones: ~7% of the
    encoder's work at the cost of tokenizing every text once more in this process
    (docs/benchmarks.md, "What the document side needs"). Only the padding changes,
    never a vector: each text is encoded on its own tokens, masked."""
    documents = getattr(encoder, "document_encoder", None)
    found = documents() if documents else None
    tokenizer = getattr(found, "tokenizer", None)
    # A GPU encoder sorts each call's thousands of texts by token count itself
    # (encoders/torch.py): counting here too would only tokenize every text once more,
    # 35 s of a 100k-tool reindex on two cores against ~20 s of encoding on an H200.
    if tokenizer is None or getattr(found, "device", "cpu") != "cpu" or len(order) < 2:
        return order
    count: dict[str, int] = {}
    for start in range(0, len(order), chunk):
        keys = order[start : start + chunk]
        encodings = tokenizer.encode_batch([texts[h] for h in keys])
        for key, encoding in zip(keys, encodings, strict=True):
            count[key] = len(encoding.ids)
    return sorted(order, key=count.__getitem__)


def _spread(batches: list[list[str]]) -> list[list[str]]:
    """Batches of like lengths (made shortest first) in the order shortest, longest, next
    shortest, next longest...: tools/s stays steady through the run, so the progress line's
    rate and ETA hold from the first batches on (shortest first all the way, the second
    half of 5,000 generated tools holds 1.7x the tokens of the first, so an early ETA
    would be far too short)."""
    spread = []
    low, high = 0, len(batches) - 1
    while low <= high:
        spread.append(batches[low])
        if low != high:
            spread.append(batches[high])
        low, high = low + 1, high - 1
    return spread


def _exported(model_id: str, progress: Callable[[str], None] | None = None) -> Any:
    """The model's encoder, with a current ONNX export made on this host if it had none
    (``progress`` hears what is being prepared)."""
    encoder = embedder(model_id)
    if not encoder.onnx_current():
        if not encoder.onnx_exported():  # optimising an export needs no model
            encoder.model()
        encoder.export_onnx(progress=progress)
    return encoder


def export_query_encoder(conn: sqlite3.Connection) -> bool:
    """Make this host's ONNX export of the model the catalog's vectors came from, as
    ``reindex`` would, writing nothing to the catalog: a replica's catalog arrives indexed
    from the primary, and its queries must be encoded as the primary's are. The export is
    made from the model's package, so every host gets the same graphs. Returns whether
    one was made."""
    recorded = reader.meta(conn, "embedding_model")
    if recorded is None or not _needs_export(recorded):
        return False
    _exported(recorded)
    return True


def _needs_export(model_id: str) -> bool:
    """Whether the model has no current ONNX export that could be made here."""
    from .encoders.onnx import onnx_installed

    return embeddings_installed() and onnx_installed() and not embedder(model_id).onnx_current()


def _embed_usage(
    conn: sqlite3.Connection,
    lock: AbstractContextManager[Any],
    model_id: str,
    encoder: Any,
    batch_size: int,
) -> int:
    """Embed recorded queries that have no vector for the model (learning from use)."""
    with lock:
        if not reader.meta(conn, "learn_from_use") or not embeddings_installed():
            return 0
        stale = conn.execute(
            "SELECT id, query FROM usage WHERE principal = '' "
            "AND (model IS NOT ? OR vector IS NULL) ORDER BY id",
            (model_id,),
        ).fetchall()
    if not stale:
        return 0
    encoder = encoder or embedder(model_id)
    for start in range(0, len(stale), batch_size):
        batch = stale[start : start + batch_size]
        vectors = encoder.encode([q for _, q in batch], batch_size=batch_size)
        with lock:
            writer.store_usage_vectors(
                conn, model_id, [(i, to_blob(v)) for (i, _), v in zip(batch, vectors, strict=True)]
            )
    return len(stale)


def status(conn: sqlite3.Connection, engine: SearchEngine) -> dict[str, Any]:
    """Index coverage per mode, the embedding model and the revision (one read snapshot)."""
    _, model = engine.models(conn)
    # Kept counts and FTS5's own totals record: nothing here scans the tools.
    with_vectors, active = counts.vectors(conn, model), counts.active_tools(conn)
    fts_rows, _ = index_totals(conn)
    toolkits = conn.execute("SELECT count(*) FROM toolkits WHERE active = 1").fetchone()[0]
    versions = conn.execute("SELECT count(*) FROM toolkits").fetchone()[0]
    return {
        "revision": reader.revision(conn),
        "schema_version": int(reader.meta(conn, "schema_version")),
        "toolkits": toolkits,
        "toolkit_versions": versions,
        "active_tools": active,
        "default_mode": engine.best_mode(conn),
        "embeddings_installed": embeddings_installed(),
        "embedding_model": model,
        "embedding_dim": reader.meta(conn, "embedding_dim"),
        "coverage": {
            "bm25": {"indexed": fts_rows, "of": active},
            "embedding": {"indexed": with_vectors, "of": active},
            "regex": {"indexed": active, "of": active},
        },
    }
