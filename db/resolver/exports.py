"""Snapshot export SQL: the export rows, and the accepted state read for an export.

The state is read inside the caller's ``REPEATABLE READ READ ONLY`` transaction
(``db.resolver.retained_events.begin_snapshot``): one ``COPY (SELECT <fields> …) TO STDOUT``
per kind of record, each in key order, so PostgreSQL spells the records in its own
text format (``schemas.exports`` documents them) and streams them; the caller cuts
the lines into chunks as they come, and an export's memory does not grow with the
catalog.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from schemas.ids import StreamId

_STREAM = "tenant_id = %s AND catalog_id = %s AND history_epoch = %s"


# Export rows --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExportRow:
    export_id: uuid.UUID
    stream: StreamId
    lease_id: uuid.UUID
    requested_by: str
    status: str
    position: int | None
    chunks: int
    records: int
    manifest_key: str | None
    manifest_sha256: str | None
    error_code: str | None
    error_message: str | None
    created_at: datetime
    heartbeat_at: datetime
    ready_at: datetime | None
    deleted_at: datetime | None
    # Seconds since the last heartbeat, by the database clock, when read.
    idle_seconds: float


_COLUMNS = (
    "export_id, tenant_id, catalog_id, history_epoch, lease_id, requested_by, status,"
    " position, chunks, records, manifest_key, manifest_sha256, error_code, error_message,"
    " created_at, heartbeat_at, ready_at, deleted_at,"
    " extract(epoch FROM clock_timestamp() - heartbeat_at)::float8"
)


def _export(row: tuple[Any, ...]) -> ExportRow:
    export_id, t, c, e, lease_id, by, status, position, *rest = row
    return ExportRow(
        export_id, StreamId(str(t), str(c), int(e)), lease_id, str(by), str(status),
        None if position is None else int(position), *rest,
    )  # fmt: skip


def insert_export(
    conn: psycopg.Connection, export_id: uuid.UUID, stream: StreamId, lease_id: uuid.UUID, by: str
) -> ExportRow:
    row = conn.execute(
        "INSERT INTO snapshot_export (export_id, tenant_id, catalog_id, history_epoch,"
        f" lease_id, requested_by) VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
        (export_id, *stream, lease_id, by),
    ).fetchone()
    assert row is not None
    return _export(row)


def get_export(conn: psycopg.Connection, export_id: uuid.UUID) -> ExportRow | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM snapshot_export WHERE export_id = %s", (export_id,)
    ).fetchone()
    return None if row is None else _export(row)


def exports_of(conn: psycopg.Connection, stream: StreamId) -> list[ExportRow]:
    """A stream's exports, newest first."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM snapshot_export WHERE {_STREAM} ORDER BY created_at DESC,"
        " export_id",
        tuple(stream),
    ).fetchall()
    return [_export(r) for r in rows]


def streams_with_exports(conn: psycopg.Connection) -> list[StreamId]:
    rows = conn.execute(
        "SELECT DISTINCT tenant_id, catalog_id, history_epoch FROM snapshot_export"
        " WHERE status <> 'deleted' ORDER BY 1, 2, 3"
    ).fetchall()
    return [StreamId(str(t), str(c), int(e)) for t, c, e in rows]


def heartbeat(conn: psycopg.Connection, export_id: uuid.UUID, chunks: int, records: int) -> bool:
    """Record progress of a writing export; False if it is no longer writing."""
    cur = conn.execute(
        "UPDATE snapshot_export SET chunks = %s, records = %s, heartbeat_at = clock_timestamp()"
        " WHERE export_id = %s AND status = 'writing'",
        (chunks, records, export_id),
    )
    return cur.rowcount > 0


def mark_ready(
    conn: psycopg.Connection,
    export_id: uuid.UUID,
    position: int,
    chunks: int,
    records: int,
    manifest_key: str,
    manifest_sha256: str,
) -> bool:
    cur = conn.execute(
        "UPDATE snapshot_export SET status = 'ready', position = %s, chunks = %s, records = %s,"
        " manifest_key = %s, manifest_sha256 = %s, ready_at = clock_timestamp(),"
        " heartbeat_at = clock_timestamp() WHERE export_id = %s AND status = 'writing'",
        (position, chunks, records, manifest_key, manifest_sha256, export_id),
    )
    return cur.rowcount > 0


def mark_failed(conn: psycopg.Connection, export_id: uuid.UUID, code: str, message: str) -> bool:
    cur = conn.execute(
        "UPDATE snapshot_export SET status = 'failed', error_code = %s, error_message = %s,"
        " heartbeat_at = clock_timestamp() WHERE export_id = %s AND status = 'writing'",
        (code, message[:2000], export_id),
    )
    return cur.rowcount > 0


def mark_deleted(conn: psycopg.Connection, export_id: uuid.UUID) -> None:
    conn.execute(
        "UPDATE snapshot_export SET status = 'deleted', deleted_at = clock_timestamp()"
        " WHERE export_id = %s AND status <> 'deleted'",
        (export_id,),
    )


# The snapshot ---------------------------------------------------------------------


def snapshot_cursor(conn: psycopg.Connection, stream: StreamId) -> int:
    """The stream's committed cursor W as this snapshot sees it (0: never written)."""
    row = conn.execute(
        f"SELECT position FROM stream_cursor WHERE {_STREAM}", tuple(stream)
    ).fetchone()
    return int(row[0]) if row else 0


Block = bytes | bytearray | memoryview
"""What ``COPY … TO STDOUT`` yields: one row's bytes."""

_ONE_CATALOG = "tenant_id = %s AND catalog_id = %s"

ITEMS = (
    "SELECT item_id, revision, class_id, status, title, parent_item_id, attributes,"
    f" decision_id FROM catalog_item WHERE {_ONE_CATALOG} ORDER BY item_id"
)
DEFINITIONS = (
    "SELECT d.attribute_key, d.version, d.revision, d.label, d.value_type,"
    " to_jsonb(d.allowed_values),"
    " to_jsonb(coalesce((SELECT array_agg(a.class_id ORDER BY a.class_id)"
    "  FROM attribute_applicability a WHERE a.tenant_id = d.tenant_id"
    "  AND a.catalog_id = d.catalog_id AND a.attribute_key = d.attribute_key"
    "  AND a.version = d.version), '{}')),"
    " d.status, d.decision_id"
    " FROM attribute_definition d WHERE d.tenant_id = %s AND d.catalog_id = %s"
    " ORDER BY d.attribute_key, d.version"
)
VALUES = (
    "SELECT v.item_id, v.attribute_key, v.revision, v.definition_version, d.value_type,"
    " v.value, v.item_revision, v.decision_id"
    " FROM attribute_value v JOIN attribute_definition d ON d.tenant_id = v.tenant_id"
    " AND d.catalog_id = v.catalog_id AND d.attribute_key = v.attribute_key"
    " AND d.version = v.definition_version"
    " WHERE v.tenant_id = %s AND v.catalog_id = %s ORDER BY v.item_id, v.attribute_key"
)
MAPPINGS = (
    "SELECT listing_id, revision, item_id, item_revision, decision_id"
    f" FROM listing_mapping WHERE {_ONE_CATALOG} ORDER BY listing_id"
)
POLICIES = (
    "SELECT policy_id, version, scope, effective_from, effective_to, terms, decision_id"
    f" FROM shipping_policy_version WHERE {_ONE_CATALOG} ORDER BY policy_id, version"
)
SPLITS = (
    "SELECT s.split_id, 1, s.source_item_id, s.source_revision,"
    " ARRAY(SELECT x.item_id FROM item_split_successor x"
    "  WHERE x.tenant_id = s.tenant_id AND x.catalog_id = s.catalog_id"
    '  AND x.split_id = s.split_id ORDER BY x.item_id COLLATE "C"),'
    " coalesce((SELECT jsonb_object_agg(r.listing_id, r.to_item_id)"
    "  FROM item_split_remap r WHERE r.tenant_id = s.tenant_id"
    "  AND r.catalog_id = s.catalog_id AND r.split_id = s.split_id), '{}'::jsonb),"
    " s.decision_id"
    " FROM item_split s WHERE s.tenant_id = %s AND s.catalog_id = %s ORDER BY s.split_id"
)

STATE = (
    ("catalog_item", ITEMS),
    ("attribute_definition", DEFINITIONS),
    ("attribute_value", VALUES),
    ("listing_mapping", MAPPINGS),
    ("shipping_policy", POLICIES),
    ("item_split", SPLITS),
)
"""Each kind of export record (``schemas.exports.KINDS``, in its order) and the query
that selects its records from the accepted state, its fields in their order."""

SPELLING = ("SET LOCAL TimeZone = 'UTC'", "SET LOCAL DateStyle = 'ISO, YMD'")
"""What the snapshot sets before the ``STATE`` queries, so every timestamp is spelled
as the format says whatever the server's defaults are."""


def copy_state(
    conn: psycopg.Connection, query: str, tenant_id: str, catalog_id: str
) -> Iterator[Block]:
    """The rows of one ``STATE`` query, as ``COPY … TO STDOUT`` sends them: text format,
    one row (one line) a block, never decoded here. Call inside the snapshot
    transaction, and read to the end."""
    for statement in SPELLING:
        conn.execute(statement)
    with conn.cursor().copy(f"COPY ({query}) TO STDOUT", (tenant_id, catalog_id)) as copy:
        yield from copy
