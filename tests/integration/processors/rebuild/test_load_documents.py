"""A rebuild's load builds each search document once, after its last chunk: no chunk
writes a document (the export puts items before their values, so a refresh per chunk
wrote every document twice), and the documents the load ends with are the ones the
live path built from the same events. The build is idempotent: run again, it writes
nothing."""

from __future__ import annotations

import itertools

import psycopg
import pytest

from db import rebuilds as sql
from db.settings import DatabaseSettings
from processors.projections import search_documents
from processors.projections.bulk import LoadTarget
from processors.rebuild.load import load
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from tests.integration.processors.rebuild.test_load import (
    CATALOG,
    TENANT,
    _history_and_export,
    _live_apply,
    _rebuild,
)


@pytest.fixture()
def store(services: dict[str, str]) -> ExportStore:
    return ExportStore.from_settings(ExportSettings())


_DOCUMENT = "item_id, title, status, attribute_text, document::text, item_revision"


def _documents(conn: psycopg.Connection, generation: int) -> list[tuple[object, ...]]:
    return conn.execute(
        f"SELECT {_DOCUMENT} FROM product_search_document WHERE generation = %s ORDER BY 1",
        (generation,),
    ).fetchall()


def test_the_load_builds_each_document_once_at_its_end(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    manifest = _history_and_export(clean_db, store)
    assert len(manifest.chunks) > 1
    _live_apply(clean_db)
    rebuild_id = _rebuild(clean_db, manifest)
    written: list[int] = []

    def after_chunk(_chunks: int, _rows: int) -> None:
        with psycopg.connect(clean_db.product_dsn) as conn:
            found = conn.execute(
                "SELECT count(*) FROM product_search_document WHERE generation = 2"
            ).fetchone()
        assert found is not None
        written.append(int(found[0]))

    load(clean_db.product_dsn, rebuild_id, manifest, store.get, after_chunk)
    assert written == [0] * len(manifest.chunks)  # no chunk wrote a document
    with psycopg.connect(clean_db.product_dsn) as conn:
        live, rebuilt = _documents(conn, 1), _documents(conn, 2)
        row = sql.get(conn, rebuild_id)
        assert row is not None and row.phase == "catching_up"
        # every item has its document, and some carry their attribute values' text
        assert len(rebuilt) == manifest.by_aggregate["catalog_item"]
        assert any(str(d[3]) for d in rebuilt)
        assert rebuilt == live
        positions = conn.execute(
            "SELECT DISTINCT position FROM product_search_document WHERE generation = 2"
        ).fetchall()
        assert positions == [(manifest.position,)]
        # run again (a final step retried after its commit was lost): nothing written
        again = search_documents.build_loaded(
            conn, LoadTarget(2, TENANT, CATALOG, manifest.position)
        )
        assert again == 0
        # the build turned nested loops off for its statement only
        assert conn.execute("SHOW enable_nestloop").fetchone() == ("on",)
        assert _documents(conn, 2) == rebuilt


def test_documents_are_built_in_ranges_at_once_and_a_crash_between_them_is_made_good(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    """Three connections: the items cut into three ranges of about the same count,
    together every item once. A crash after some ranges committed (the phase still
    ``loading``, one range's documents missing, one document stale) is made good by
    the next load, which copies no chunk again."""
    manifest = _history_and_export(clean_db, store)
    _live_apply(clean_db)
    rebuild_id = _rebuild(clean_db, manifest)
    load(clean_db.product_dsn, rebuild_id, manifest, store.get, connections=3)
    target = LoadTarget(2, TENANT, CATALOG, manifest.position)
    with psycopg.connect(clean_db.product_dsn) as conn:
        ranges = search_documents.item_ranges(conn, target, 3)
        items = [
            str(r[0])
            for r in conn.execute(
                "SELECT item_id FROM product_item WHERE generation = 2 ORDER BY item_id"
            )
        ]
        assert _documents(conn, 2) == _documents(conn, 1)
    assert len(ranges) == 3 and ranges[0][0] == "" and ranges[-1][1] is None
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    counts = [sum(1 for i in items if lo <= i and (hi is None or i < hi)) for lo, hi in ranges]
    assert sum(counts) == len(items) and max(counts) == -(-len(items) // 3)

    low, high = ranges[1]
    with psycopg.connect(clean_db.product_dsn) as conn:
        conn.execute(
            "DELETE FROM product_search_document WHERE generation = 2 AND item_id >= %s"
            " AND item_id < %s",
            (low, high),
        )
        conn.execute(
            "UPDATE product_search_document SET attribute_text = 'stale' WHERE generation = 2"
            " AND item_id = %s",
            (items[0],),
        )
        sql.update(conn, rebuild_id, "loading")
    fetched: list[str] = []

    def counting(key: str) -> bytes:
        fetched.append(key)
        return store.get(key)

    load(clean_db.product_dsn, rebuild_id, manifest, counting, connections=3)
    assert fetched == []
    with psycopg.connect(clean_db.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
        assert row is not None and row.phase == "catching_up"
        assert _documents(conn, 2) == _documents(conn, 1)
