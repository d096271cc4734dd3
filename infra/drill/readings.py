"""What the drill reads of its catalog's streams: the positions committed, published,
applied and reported for each, the old epoch's deliveries after the fence, the
generation served; and the retention pass it runs last."""

from __future__ import annotations

from typing import Any

import psycopg

from db.resolver.outbox import published_position
from db.resolver.retention import committed_position
from infra.drill.rig import CATALOG, CONSUMER
from schemas.ids import StreamId


def progress(product_dsn: str, stream: StreamId) -> int:
    """The live consumer's applied position on ``stream`` (0 before any)."""
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT position FROM stream_progress WHERE consumer = %s AND tenant_id = %s"
            " AND catalog_id = %s AND history_epoch = %s",
            (CONSUMER, *stream),
        ).fetchone()
    return int(row[0]) if row else 0


def committed(resolver_dsn: str, stream: StreamId) -> int:
    """The last position committed on ``stream``."""
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        return committed_position(conn, stream)


def published(resolver_dsn: str, stream: StreamId) -> int:
    """The last position of ``stream`` the relay published."""
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        return published_position(conn, stream)


def old_epoch_audit(product_dsn: str, tenant: str, fenced_at: Any) -> tuple[int, int]:
    """(old-epoch deliveries judged after the fence, those applied after it)."""
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE outcome = 'ignored_old_epoch'),"
            " count(*) FILTER (WHERE outcome = 'applied')"
            " FROM inbox WHERE consumer = %s AND tenant_id = %s AND catalog_id = %s"
            " AND history_epoch = 1 AND received_at >= %s",
            (CONSUMER, tenant, CATALOG, fenced_at),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def reported(resolver_dsn: str, stream: StreamId) -> int:
    """The live consumer's progress on ``stream`` as the resolver last acknowledged it."""
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT reported_position FROM stream_consumer WHERE tenant_id = %s"
            " AND catalog_id = %s AND history_epoch = %s AND consumer_id = %s",
            (*stream, CONSUMER),
        ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def prune(resolver_dsn: str, stream: StreamId) -> int:
    """Prune ``stream`` with no age limit: how many outbox rows went."""
    from producers.retention.pruner import RetentionPolicy, prune_stream

    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        return prune_stream(conn, stream, RetentionPolicy(age_seconds=0, batch_size=1000)).deleted


def issued_at(control_dsn: str, tenant: str, epoch: int) -> Any:
    """When the catalog's ``epoch`` was issued: the fence's instant."""
    with psycopg.connect(control_dsn, autocommit=True) as conn:
        issued = conn.execute(
            "SELECT issued_at FROM history_epoch_log WHERE tenant_id = %s"
            " AND catalog_id = %s AND epoch = %s",
            (tenant, CATALOG, epoch),
        ).fetchone()
    assert issued is not None
    return issued[0]


def positions(resolver_dsn: str, stream: StreamId) -> tuple[Any, ...]:
    """(first, count, last) of the positions in ``stream``'s outbox."""
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT min(position), count(*), max(position) FROM outbox WHERE tenant_id = %s"
            " AND catalog_id = %s AND history_epoch = %s",
            tuple(stream),
        ).fetchone()
    assert row is not None
    return tuple(row)


def serving_generation(product_dsn: str, stream: StreamId) -> int:
    """The generation the live consumer serves ``stream`` from (1 before any rebuild)."""
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        gen = conn.execute(
            "SELECT generation FROM stream_progress WHERE consumer = %s AND tenant_id = %s"
            " AND catalog_id = %s AND history_epoch = %s",
            (CONSUMER, *stream),
        ).fetchone()
    return int(gen[0]) if gen else 1
