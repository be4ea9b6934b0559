"""The in-memory BM25 index saved beside the catalog, so that a process opening a large
catalog loads it instead of rebuilding it (a build is ~6 s of CPU at 100k tools, ten times
that at 1M, while FTS5 answers at 10-30 ms a query).

A derived cache like the index itself: the folder ``<catalog>.bm25`` holds ``index.json``
(the stamp: format, catalog revision, column weights, FTS5's row and token totals at that
revision, the names, sizes and sha256 digests of the files below), a tantivy index folder
and a binary file of the packed tools, terms and names. It is used only when its stamp
matches what the loading read transaction sees: a change from any process moves the
revision, and a file restored from elsewhere would have to match FTS5's totals too.

Read from disk, so checked before it is trusted:

- the folder is trusted like the catalog: a real folder (not a symlink), owned by this
  user or the catalog's owner, that not everyone may write; else it is neither read nor
  written (the index is built in memory);
- a stamp names files inside that folder only (``tantivy-<hex>``, ``data-<hex>.bin``), each
  opened without following symlinks, a regular file of the size and digest recorded;
  anything unreadable, of another shape or inconsistent is ignored (the index is rebuilt)
  and never served; parsing is JSON and ``array`` only: no pickle, nothing a file could
  make run;
- one process builds and saves at a time (an ``flock`` on ``lock``): another waits and
  loads what it saved. Files are written under new names and the stamp is replaced last
  (``os.replace``), so a ``kill -9`` mid-save leaves the previous stamp pointing at
  complete files; a save that fails removes what it wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import sqlite3
import stat
import struct
import sys
import uuid
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..files import checks as saved_files
from ..files.checks import STAGING, digest_regular, read_regular
from ..store.counts import index_totals
from ..store.reader import fts_history

FORMAT = 3  # 3: brought forward by changed rows (tantivy_df, stale, delta)
# Catalogs from this many tools on are served from a saved index (a process builds smaller
# ones in memory, in the query: ``engine.BACKGROUND_BUILD_FROM``, which a test keeps equal),
# so writes save one from here on.
SAVED_FROM = 1000
STAMP = saved_files.STAMP
SECTIONS = (
    "terms",
    "doc_freq",
    "names",
    "rows",
    "sizes",
    "tools",
    "positions",
    "tantivy_df",
    "stale",
)
_TANTIVY = re.compile(r"tantivy-[0-9a-f]{32}")
_DATA = re.compile(r"data-[0-9a-f]{32}\.bin")
_TANTIVY_FILE = re.compile(r"[0-9A-Za-z_-][0-9A-Za-z._-]*")  # no path, no dot first
# tantivy's bookkeeping, not read to search: locks, and the files its writer manages.
_UNTRACKED = frozenset({".tantivy-meta.lock", ".tantivy-writer.lock", ".managed.json"})


def folder(catalog_path: str) -> Path:
    return Path(catalog_path + ".bm25")


def trusted_folder(catalog_path: str, create: bool = False) -> Path | None:
    """The saved index's folder when it may be trusted like the catalog (made if asked);
    None otherwise (``saved_files.trusted_folder``)."""
    return saved_files.trusted_folder(folder(catalog_path), catalog_path, create)


def stamp(conn: sqlite3.Connection, revision: int, weights: tuple[float, ...]) -> dict[str, Any]:
    """What an index built in ``conn``'s read transaction at ``revision`` is valid for."""
    rows, tokens = index_totals(conn)
    return {
        "format": FORMAT,
        "revision": revision,
        "weights": list(weights),
        "rows": rows,
        "tokens": tokens,
        "byteorder": sys.byteorder,
        # which history reached ``revision`` (a catalog restored from a backup reaches the
        # same numbers by other writes): a save of another one is never taken up
        "history": fts_history(conn, revision),
    }


def new_tantivy_folder(root: Path) -> Path:
    """A fresh folder in ``root`` for a tantivy index about to be built and saved."""
    path = root / f"tantivy-{uuid.uuid4().hex}"
    path.mkdir()
    return path


def save(
    root: Path,
    valid_for: dict[str, Any],
    tantivy_dir: Path,
    state: dict[str, Any],
    tantivy_files: dict[str, Any] | None = None,
) -> None:
    """Write the index's Python side, then the stamp; drop what older stamps named. Call
    holding ``build_lock``. ``tantivy_files``: the stamp's record of ``tantivy_dir`` when it
    was saved before and checked since (an index brought forward keeps tantivy's part).
    A failure (a full disk) removes what this call wrote and raises ``OSError``; the
    previous stamp stands."""
    data_name = f"data-{uuid.uuid4().hex}.bin"
    tools = state["tools"]  # bytes, or pieces of them (``TantivyIndex.forward_tools``)
    sections: list[tuple[str, list[bytes | memoryview]]] = [
        ("terms", [json.dumps(state["terms"]).encode()]),
        ("doc_freq", [array("I", state["doc_freq"]).tobytes()]),
        ("names", [json.dumps(state["names"]).encode()]),
        ("rows", [array("q", state["rows"]).tobytes()]),
        ("sizes", [array("I", state["sizes"]).tobytes()]),
        ("tools", [tools] if isinstance(tools, bytes) else list(tools)),
        ("positions", [array("q", state["positions"]).tobytes()]),
        ("tantivy_df", [array("I", state["tantivy_df"]).tobytes()]),
        ("stale", [array("q", state["stale"]).tobytes()]),
    ]
    data_digest = hashlib.sha256()
    with saved_files.removed_on_failure(root / data_name):
        with open(root / data_name, "xb") as f:
            for _, pieces in sections:
                for piece in pieces:
                    f.write(piece)
                    data_digest.update(piece)
            f.flush()
            os.fsync(f.fileno())
        header = {
            **valid_for,
            "tantivy": tantivy_dir.name,
            "tantivy_files": tantivy_files
            or {
                entry.name: [entry.stat().st_size, digest_regular(entry)]
                for entry in tantivy_dir.iterdir()
                if entry.name not in _UNTRACKED
            },
            "data": data_name,
            "data_sha256": data_digest.hexdigest(),
            "content": state.get("content", ""),
            "sections": [[name, sum(map(len, pieces))] for name, pieces in sections],
            "meta": state["meta"],
        }
        saved_files.replace_stamp(root, header)
    for entry in root.iterdir():  # what no stamp names any more; only names of ours
        name = entry.name
        if name in (data_name, tantivy_dir.name):
            continue
        if _TANTIVY.fullmatch(name) and stat.S_ISDIR(entry.lstat().st_mode):
            import shutil  # not on the one-shot search path

            shutil.rmtree(entry, ignore_errors=True)
        elif _TANTIVY.fullmatch(name) or _DATA.fullmatch(name) or STAGING.fullmatch(name):
            entry.unlink(missing_ok=True)


def restamp_unchanged(root: Path, valid_for: dict[str, Any], content: Callable[[], str]) -> bool:
    """Stamp the saved index for ``valid_for`` when only the revision differs and the rows
    it was built from are the same (``content()``: their digest now, computed only then):
    a revision that changed vectors alone (a reindex) keeps it instead of a full build
    (80 s at 1M tools). Call holding ``build_lock``, in the read transaction of
    ``valid_for``. ``load`` checks the files as ever before anything is served. False,
    never ``OSError``, when the stamp cannot be written."""
    header = saved_files.read_stamp(root)
    if header is None or type(header.get("content")) is not str or not header["content"]:
        return False
    if any(
        header.get(key) != value
        for key, value in valid_for.items()
        if key not in ("revision", "history")
    ):
        return False
    if header["content"] != content():
        return False
    try:
        saved_files.replace_stamp(root, {**header, **valid_for})
    except OSError:  # a full disk: built (in memory, when it cannot be saved either)
        return False
    return True


def forget_saved(catalog_path: str) -> None:
    """Remove the stamp of the index saved beside the catalog, so no process takes it up
    (its files go with the next save): the file was replaced by a copy whose rows it may
    not be built from, with nothing in the stamp to tell (a replica's copy found damaged,
    restored again at the same revision). Nothing when there is no folder to trust."""
    root = trusted_folder(catalog_path)
    if root is not None:
        with contextlib.suppress(OSError):  # none there, or no file of ours (a folder)
            (root / STAMP).unlink()


def stamped(catalog_path: str, valid_for: dict[str, Any]) -> bool:
    """Whether the saved stamp says it was saved for ``valid_for`` (its files are not
    checked here: ``load`` checks them before anything is served)."""
    root = trusted_folder(catalog_path)
    if root is None:
        return False
    header = saved_files.read_stamp(root)
    return header is not None and all(header.get(key) == value for key, value in valid_for.items())


def load(catalog_path: str, valid_for: dict[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """(tantivy folder, saved state) when a saved index matches ``valid_for``, else None."""
    found = _load(catalog_path, valid_for, valid_for)
    return None if found is None else found[:2]


def earlier_stamp(catalog_path: str, valid_for: dict[str, Any]) -> dict[str, Any] | None:
    """The stamp of an index saved at a revision before ``valid_for``'s with the same
    format and weights, to be brought forward (its files not checked here); else None."""
    root = trusted_folder(catalog_path)
    header = None if root is None else saved_files.read_stamp(root)
    if header is None or any(header.get(key) != value for key, value in _same(valid_for).items()):
        return None
    revision = header.get("revision")
    if type(revision) is not int or not 0 <= revision < valid_for["revision"]:
        return None
    return header


def load_earlier(
    catalog_path: str, valid_for: dict[str, Any]
) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:
    """(tantivy folder, saved state, its stamp) of the index ``earlier_stamp`` finds, once
    its files check out; else None."""
    header = earlier_stamp(catalog_path, valid_for)
    if header is None:
        return None
    found = _load(catalog_path, {"revision": header["revision"], **_same(valid_for)}, None)
    return found if found is not None and found[2] == header else None


def _same(valid_for: dict[str, Any]) -> dict[str, Any]:
    return {key: valid_for[key] for key in ("format", "weights", "byteorder")}


def _load(
    catalog_path: str, match: dict[str, Any], valid_for: dict[str, Any] | None
) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:
    """(tantivy folder, state, stamp) when the saved stamp matches ``match`` and its files
    check out (for ``valid_for``'s row count: the stamp's own when None), else None."""
    root = trusted_folder(catalog_path)
    if root is None:
        return None
    try:
        header = saved_files.read_stamp(root)
        if header is None:
            return None
        if any(header.get(key) != value for key, value in match.items()):
            return None
        rows_now = (valid_for or header)["rows"]
        if type(rows_now) is not int:
            return None
        tantivy_name, data_name = header["tantivy"], header["data"]
        if not (
            type(tantivy_name) is str
            and type(data_name) is str
            and _TANTIVY.fullmatch(tantivy_name)
            and _DATA.fullmatch(data_name)
        ):
            return None
        tantivy_dir = root / tantivy_name
        if not _tantivy_files_match(tantivy_dir, header["tantivy_files"]):
            return None
        sections = header["sections"]
        if [name for name, _ in sections] != list(SECTIONS):
            return None
        sizes = [int(size) for _, size in sections]
        data = read_regular(root / data_name, size=sum(sizes))
        if hashlib.sha256(data).hexdigest() != header["data_sha256"]:
            return None
        blobs: dict[str, bytes] = {}
        at = 0
        for name, size in zip(SECTIONS, sizes, strict=True):
            blobs[name] = data[at : at + size]
            at += size
        return (
            tantivy_dir,
            _state(blobs, header["meta"], rows_now, valid_for and valid_for["tokens"]),
            header,
        )
    except Exception:  # missing, torn, foreign or hostile: rebuilt, never served
        return None


def _state(blobs: dict[str, bytes], meta: Any, rows_now: int, tokens: Any) -> dict[str, Any]:
    """The saved state, once every figure a query computes with is of the right kind;
    ``ValueError`` otherwise. ``tokens``: FTS5's token total at the revision the catalog
    is read at, when the save claims to be of that one (None: an earlier one's)."""
    doc_freq, rows, sizes, positions = array("I"), array("q"), array("I"), array("q")
    tantivy_df, stale = array("I"), array("q")
    doc_freq.frombytes(blobs["doc_freq"])
    rows.frombytes(blobs["rows"])
    sizes.frombytes(blobs["sizes"])
    positions.frombytes(blobs["positions"])
    tantivy_df.frombytes(blobs["tantivy_df"])
    stale.frombytes(blobs["stale"])
    terms, names = json.loads(blobs["terms"]), json.loads(blobs["names"])
    if not (
        type(meta) is dict
        and type(terms) is list
        and type(names) is list
        and all(type(t) is str for t in terms)
        and all(type(n) is str for n in names)
        and len(doc_freq) == len(tantivy_df) == len(terms)
        and len(rows) == len(sizes) == len(names) == meta.get("n_docs") == rows_now
        and sum(sizes) == len(blobs["tools"])
        and meta.get("counts") in ("I", "d")
        and all(_positive(meta.get(key)) for key in ("scale", "avgdl", "base_avgdl"))
        and all(type(meta.get(key)) is bool for key in ("bounded", "holds_every_term"))
        and all(_whole(meta.get(key)) for key in ("length_total", "delta"))
        and meta["delta"] <= len(rows)
        # a packed tool starts with its 4-byte length (``lexical_index._unpack``)
        and min(sizes, default=4) >= 4
        and _rows_as_tantivy_holds(rows, positions, stale, meta["delta"])
        # the average length every score divides by: 0 raised from every search, another
        # figure scored every tool wrong
        and _lengths_add_up(sizes, blobs["tools"], meta["length_total"], tokens)
        and (meta["length_total"] > 0 or not rows)  # a tool's name is a token
    ):
        raise ValueError("a saved index of another shape")
    return {
        "terms": terms,
        "doc_freq": doc_freq,
        "names": names,
        "rows": rows,
        "sizes": sizes,
        "tools": blobs["tools"],
        "positions": positions,
        "tantivy_df": tantivy_df,
        "stale": stale,
        "meta": meta,
    }


def _rows_as_tantivy_holds(
    rows: array[int], positions: array[int], stale: array[int], delta: int
) -> bool:
    """Whether the rows are tantivy's documents in order (one pass over the same rows
    builds both), less the stale ones, then ``delta`` rows it does not hold: a position
    naming a row not held was a KeyError from every search once served, a row held twice
    a document scored as another's."""
    if not stale and not delta:
        return not positions or positions == rows
    if not positions:  # several segments: documents found by their id, not brought forward
        return False
    passed_over = set(stale)
    held = array("q", [row for row in positions if row not in passed_over])
    return held == rows[: len(rows) - delta] and len(set(rows)) == len(rows)


def _lengths_add_up(sizes: array[int], tools: bytes, total: int, tokens: Any) -> bool:
    """Whether ``total`` is the packed tools' lengths added up (each tool's first 4 bytes:
    ``lexical_index._unpack``). It is FTS5's token total (``tokens``, the catalog's), which
    costs nothing to compare; only where the two differ, or that is not known (a save of
    an earlier revision, whose stamp names its own), are the lengths read."""
    if total == tokens:
        return True
    length = struct.Struct("I").unpack_from
    lengths: int = sum(
        length(tools, at)[0] for at in itertools.accumulate(sizes, initial=0) if at < len(tools)
    )
    return total == lengths


def _whole(value: Any) -> bool:
    return type(value) is int and value >= 0


def _positive(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def _tantivy_files_match(tantivy_dir: Path, files: Any) -> bool:
    """Whether ``tantivy_dir`` is a real folder holding each recorded file, as recorded."""
    if type(files) is not dict or not files:
        return False
    if not stat.S_ISDIR(os.lstat(tantivy_dir).st_mode):
        return False
    for name, (size, digest) in files.items():
        if not _TANTIVY_FILE.fullmatch(name) or name in _UNTRACKED:
            return False
        if digest_regular(tantivy_dir / name, size=int(size)) != digest:
            return False
    return True
