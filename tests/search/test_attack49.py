"""Hostile (attack49): the default search mode kept per revision (``SearchEngine.best_mode``,
shared by a server's readers) and the exact-name and principal's-uses reads that
``learned.lifted`` makes on the event loop (``reader.principal_uses``' CROSS JOIN,
``reader.exact_among`` sharing ``exact_matches``' rule).

The kept mode is never another model's, nor another revision's: vectors written or deleted
by another connection, a catalog asking for a model without vectors sharing the store, a copy
swapped in at the same revision. The reads answer exactly what the SQL before them did, on
a catalog built to tempt them (one tool name in many toolkits and versions, deprecated and
removed versions, case, dots, whitespace, stale statistics)."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog, Toolkit
from toolcat.search import engine, learned
from toolcat.search.embeddings import MINILM, RETRIEVER
from toolcat.search.scope import Scope
from toolcat.store import reader, writer

QUERY = "convert a time between zones"


def needs_embeddings() -> None:
    if not engine.embeddings_installed():
        pytest.skip("needs the embeddings extra")


def warm(catalog: Catalog, query: str = QUERY, **options: Any) -> str:
    """Searched until kept (the in-memory index built); returns the mode it ran in."""
    for _ in range(engine.POSTINGS_AFTER + 1):
        mode = catalog.search(query, **options).mode
    return mode


# -- the default mode, kept per revision ---------------------------------------------------


def test_the_kept_default_mode_follows_vectors_another_connection_writes(
    sample_path: Path,
) -> None:
    """Vectors added by another connection's reindex turn a server's default to hybrid at
    the very next search, for every reader sharing the store, and the kept BM25 answer is
    then never its default answer; vectors deleted (another encoder: all dropped) turn it
    back to BM25, kept again."""
    needs_embeddings()
    with Catalog(sample_path) as server, Catalog(sample_path) as pooled:
        pooled.share_indexes(server)
        assert warm(server) == "bm25"
        kept = pooled.search_kept(QUERY)
        assert kept is not None and kept.mode == "bm25"
        with Catalog(sample_path) as admin:
            admin.reindex()
        assert pooled.search_kept(QUERY) is None
        assert pooled.search(QUERY).mode == "hybrid"
        assert server.search(QUERY).mode == "hybrid"
        for catalog in (server, pooled):  # the default is hybrid: never the kept BM25 answer
            warm(catalog, mode="bm25")
            assert catalog.search_kept(QUERY) is None
            explicit = catalog.search_kept(QUERY, mode="bm25")
            assert explicit is not None and explicit.mode == "bm25"
        with Catalog(sample_path) as admin:
            writer.reset_vectors(admin._conn, RETRIEVER, "another encoder")
        assert server.search_kept(QUERY) is None  # not known at the new revision yet
        assert pooled.search(QUERY).mode == "bm25"
        warm(server)
        kept = server.search_kept(QUERY)
        assert kept is not None and kept.mode == "bm25"


def test_readers_asking_for_other_models_share_the_store_apart(sample_path: Path) -> None:
    """A catalog opened with a model that has no vectors (BM25 by default) shares a store
    with one whose model has them (hybrid): whichever asks first, neither is answered with
    the other's default, and the kept path serves only the BM25 one."""
    needs_embeddings()
    with Catalog(sample_path) as admin:
        admin.reindex()
    with (
        Catalog(sample_path) as hybrid,
        Catalog(sample_path, embedding_model=MINILM) as plain,
    ):
        plain.share_indexes(hybrid)
        assert warm(plain) == "bm25"
        assert plain.search_kept(QUERY) is not None
        assert hybrid.search_kept(QUERY) is None  # its default is not known: not BM25's
        assert hybrid.search(QUERY).mode == "hybrid"
        assert hybrid.search_kept(QUERY) is None
        again = plain.search_kept(QUERY)
        assert again is not None and again.mode == "bm25"
        assert engine.SearchEngine.known_best_mode(hybrid._search, hybrid._conn) == "hybrid"
        assert engine.SearchEngine.known_best_mode(plain._search, plain._conn) == "bm25"


def test_a_copy_at_the_same_revision_without_vectors_is_not_served_the_old_mode(
    sample_path: Path, tmp_path: Path
) -> None:
    """A copy restored again at the same revision (a replica's) that holds no vectors: once
    the readers forget what they kept (``forget_kept``), the default is BM25 again."""
    needs_embeddings()
    with Catalog(sample_path) as admin:
        admin.reindex()
        revision = admin.revision
    bare = tmp_path / "bare.db"
    shutil.copy(sample_path, bare)
    with sqlite3.connect(bare) as conn:  # the same revision, its vectors gone
        conn.execute("DELETE FROM embeddings")
        conn.execute("UPDATE meta SET value = ? WHERE key = 'revision'", (revision,))
    conn.close()
    with Catalog(sample_path) as served:
        assert served.search(QUERY).mode == "hybrid"
        for suffix in ("-wal", "-shm"):
            Path(f"{sample_path}{suffix}").unlink(missing_ok=True)
        shutil.copy(bare, sample_path)
        served.forget_kept()
        with Catalog(sample_path) as fresh:
            fresh.share_indexes(served)
            assert fresh.revision == revision
            assert fresh.search(QUERY).mode == "bm25"


# -- the reads lifted() makes: as they were ---------------------------------------------


def uses_before(
    conn: sqlite3.Connection, principal: str, ids: Sequence[int]
) -> dict[int, list[str]]:
    """``principal_uses`` as it read before attack48's follow-up (the oracle)."""
    if not ids or not reader.meta(conn, "learn_from_use"):
        return {}
    found: dict[int, list[str]] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        for tool_id, query in conn.execute(
            "SELECT t.id, u.query FROM usage u JOIN tools t ON t.toolkit = u.toolkit "
            f"AND t.name = u.name WHERE u.principal = ? AND t.id IN ({','.join('?' * len(chunk))}) "
            "ORDER BY u.id DESC",
            (principal, *chunk),
        ):
            found.setdefault(tool_id, []).append(query)
    return found


def exact_before(conn: sqlite3.Connection, text: str, filters: Any) -> list[int]:
    candidate = text.strip()
    if len(candidate) > reader.MAX_ADDRESS_CHARS or any(c.isspace() for c in candidate):
        return []
    toolkit, dot, name = candidate.partition(".")
    if dot:
        rows = reader.find_rows(conn, name, toolkit=toolkit.lower(), nocase=True, filters=filters)
    else:
        rows = reader.find_rows(conn, candidate, nocase=True, filters=filters)
    return [row[0] for row in rows]


def among_before(conn: sqlite3.Connection, text: str, ids: Sequence[int]) -> set[int]:
    candidate = text.strip()
    if not ids or len(candidate) > reader.MAX_ADDRESS_CHARS or any(c.isspace() for c in candidate):
        return set()
    toolkit, dot, name = candidate.partition(".")
    clause, params = (
        ("t.name = ? COLLATE NOCASE AND t.toolkit = ?", [name, toolkit.lower()])
        if dot
        else ("t.name = ? COLLATE NOCASE", [candidate])
    )
    found: set[int] = set()
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        found.update(
            row[0]
            for row in conn.execute(
                f"SELECT t.id FROM tools t WHERE t.id IN ({','.join('?' * len(chunk))}) "
                f"AND {clause}",
                (*chunk, *params),
            )
        )
    return found


def namesakes(version: str, count: int) -> list[Toolkit]:
    """``count`` toolkits each holding ``Get`` and ``get.all`` (one name, many toolkits)."""
    return [
        Toolkit.model_validate(
            {
                "toolkit": f"kit{i}",
                "version": version,
                "module": "tests.fixtures",
                "tools": [
                    {
                        "name": name,
                        "description": f"Fetch record {i} from the store ({version}).",
                        "parameters": {"type": "object", "properties": {}},
                        "implementation": "tests.fixtures.tools:add",
                    }
                    for name in ("Get", "get_all")
                ],
            }
        )
        for i in range(count)
    ]


@pytest.fixture
def tempting(tmp_path: Path) -> Path:
    """Many toolkits with the same names, old, new, deprecated and removed versions, uses
    recorded by two principals, and statistics that tempt SQLite into another join order."""
    path = tmp_path / "tempting.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.register(namesakes("1.0.0", 12))
        catalog.register(namesakes("2.0.0", 12))
        catalog.register(namesakes("3.0.0", 4))
        for i in range(4):
            catalog.deprecate(f"kit{i}", "3.0.0")
        catalog.remove("kit3", "2.0.0")
        for principal in ("carol", "dave"):
            for i in range(12):
                catalog.record_uses(
                    [(f"fetch record {i} {principal}", f"kit{i}.Get")] * 2
                    + [(f"all records {i}", f"kit{i}.get_all")],
                    principal=principal,
                )
        catalog.record_uses([("fetch it", "kit1.Get")])  # the catalog's own caller
        catalog._conn.execute("ANALYZE")
    return path


ADDRESSES = [
    "Get",
    "get",
    "GET",
    "  get  ",
    "\tget\n",
    "kit1.get",
    "KIT1.Get",
    "Kit1.GET",
    "kit3.get",
    "kit1.get_all",
    "kit1.get.all",
    ".get",
    "get.",
    "kit1.",
    "kit1..get",
    "get all",
    "nokit.get",
    "x" * 131,
    "kit1." + "g" * 125,
    "calculate",
    "math.calculate",
    "Math.Calculate",
    "",
    "   ",
    "kit1.get\u00a0",
    "\u212aIT1.get",
]


def test_exact_names_and_uses_read_as_before(tempting: Path) -> None:
    """Every address (case, dots, whitespace, lengths, a Kelvin sign), every principal,
    learning on and off: ``exact_matches``, ``exact_among`` and ``principal_uses`` answer
    what the SQL before them answered."""
    with Catalog(tempting) as catalog:
        conn = catalog._conn
        all_ids = [row[0] for row in conn.execute("SELECT id FROM tools ORDER BY id DESC")]
        active = [
            row[0]
            for row in conn.execute(
                "SELECT t.id FROM tools t JOIN toolkits k ON k.id = t.toolkit_id WHERE k.active = 1"
            )
        ]
        filters = catalog._scope_filters(conn, Scope())
        for text in ADDRESSES:
            assert reader.exact_matches(conn, text, filters) == exact_before(conn, text, filters)
            for ids in (all_ids, active, all_ids[:3], []):
                assert reader.exact_among(conn, text, ids) == among_before(conn, text, ids), text
        for principal in ("carol", "dave", "", "nobody", "carol' OR 1=1 --"):
            for ids in (all_ids, active, active[:1], [], [10**9]):
                assert reader.principal_uses(conn, principal, ids) == uses_before(
                    conn, principal, ids
                )
        assert reader.principal_uses(conn, "carol", all_ids)  # the oracle saw something
        catalog.learning = False
        assert (
            reader.principal_uses(conn, "carol", all_ids)
            == {}
            == uses_before(conn, "carol", all_ids)
        )


def test_lifted_reorders_as_before(tempting: Path) -> None:
    """``learned.lifted`` over real rankings: what it makes of the reads before and after is
    the same ranking, for pinned exact names too."""
    with Catalog(tempting) as catalog:
        conn = catalog._conn
        for query in ("fetch record 3 carol", "Get", "kit5.get", "all records 7", "get_all"):
            ranking = catalog._search.rank(
                conn,
                query,
                mode="bm25",
                model_id="",
                query_vector=None,
                filters=catalog._scope_filters(conn, Scope()),
                k=30,
            )
            for principal in ("carol", "dave", "nobody"):
                now = learned.lifted(conn, ranking, principal)
                with pytest.MonkeyPatch.context() as patch:  # the reads before: the oracle
                    patch.setattr(learned, "principal_uses", uses_before)
                    patch.setattr(learned, "exact_among", among_before)
                    before = learned.lifted(conn, ranking, principal)
                assert now.ranked == before.ranked, (query, principal)
