"""A rebuild's load builds each search document once, after its last chunk: no chunk
writes a document (the export puts items before their values, so a refresh per chunk
wrote every document twice), and the documents the load ends with are the ones the
live path built from the same events. The build is idempotent: run again, it writes
nothing."""

from __future__ import annotations

import psycopg
import pytest

from db.product import rebuilds as sql
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
