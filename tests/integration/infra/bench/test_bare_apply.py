"""The applier's baseline writes what it stands for, against real PostgreSQL: the bare
side of phase (c) leaves the same item rows and the same search documents in its
copies of the tables as ``Applier.apply`` leaves in the projection, so the bench
compares the pipeline's guarantees, not two different amounts of projection work."""

from __future__ import annotations

import psycopg

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from infra.bench.applier import BARE_TABLE_DDL, CATALOG, MessageSource, bare_apply
from processors.applier.batch import Applier
from schemas.codec import CODEC

ITEM_COLUMNS = "tenant_id, catalog_id, item_id, class_id, status, title, attributes, revision"
DOCUMENT_COLUMNS = "tenant_id, catalog_id, item_id, title, status, attribute_text, document"


class _Box:
    """The one part of a bench sandbox a message source needs."""

    def tenant(self, name: str) -> str:
        return f"bare-{name}"


def _rows(conn: psycopg.Connection, table: str, columns: str) -> list[tuple[object, ...]]:
    return conn.execute(f"SELECT {columns} FROM {table} ORDER BY tenant_id, item_id").fetchall()


def test_the_bare_side_writes_the_items_and_search_documents_the_applier_writes(
    clean_db: DatabaseSettings,
) -> None:
    source = MessageSource(_Box(), "s")  # type: ignore[arg-type]
    batches = [source.batch(50), source.batch(50)]
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as control:
        for tenant in source.tenants:
            ensure_epoch(control, tenant, CATALOG)
    epochs = EpochSource(clean_db.control_dsn)
    applier = Applier(clean_db.product_dsn, epochs, CODEC, consumer="bare-test")
    try:
        for batch in batches:
            assert applier.apply(batch).applied == len(batch)
    finally:
        applier.close()
        epochs.close()
    with psycopg.connect(clean_db.product_dsn) as conn:
        for ddl in BARE_TABLE_DDL:
            conn.execute(ddl.replace("CREATE TABLE", "CREATE TEMP TABLE"))
        # Temporary tables come first on the search path: the bare statements, aimed
        # at bench_*, write these, and nothing stays behind after the test.
        written = sum(bare_apply(conn, batch) for batch in batches)
        assert written == 100
        items = _rows(conn, "product_item", ITEM_COLUMNS)
        documents = _rows(conn, "product_search_document", DOCUMENT_COLUMNS)
        assert len(items) == len(documents) == 100
        assert _rows(conn, "bench_product_item", ITEM_COLUMNS) == items
        assert _rows(conn, "bench_product_search_document", DOCUMENT_COLUMNS) == documents
