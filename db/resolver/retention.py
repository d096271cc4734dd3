"""Retention control SQL: the retention-control lock, registered consumers, rebuild
leases and the statements of the pruner.

Every function runs inside the caller's transaction; the callers in
``producers.retention`` decide where transactions begin and end. Times are taken
from the database clock (``clock_timestamp()``, not ``now()``, which is the start of
a transaction that may have waited long for a lock), so every process agrees on
when a lease expires.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from schemas.ids import StreamId

_WHERE_STREAM = "tenant_id = %s AND catalog_id = %s AND history_epoch = %s"


def _key(stream: StreamId) -> tuple[str, str, int]:
    return (stream.tenant_id, stream.catalog_id, stream.history_epoch)


def lock_retention(conn: psycopg.Connection, stream: StreamId) -> int:
    """Take the stream's retention-control lock; returns its pruned-through position.

    The lock is the ``stream_retention`` row, held FOR UPDATE until the caller's
    transaction ends. It serializes, per stream, everything that can lower the
    retention floor or acts on it: consumer registration (also the implicit one of a
    first progress report), lease creation, renewal and advancement, deregistration
    and lease release, and each batch of the pruner. The pruner reads the floor and
    deletes under it, so a new consumer or lease either commits first and is in the
    floor that batch computes, or waits for the batch to commit and then reads the
    new ``pruned_through`` here, which is exactly what it is promised to keep above.
    Without the lock a batch that read the floor just before a registration
    committed could delete events the new consumer was told were retained, and a
    lease renewed while a batch judged it expired would pin events already gone.

    Raising a registered consumer's progress does not take it: that only raises the
    floor, so a batch that read the old value merely prunes less. Writers and the
    relay never take it, so pruning never delays a write or a publication; other
    streams are unaffected.
    """
    select = f"SELECT pruned_through FROM stream_retention WHERE {_WHERE_STREAM} FOR UPDATE"
    row = conn.execute(select, _key(stream)).fetchone()
    if row is None:
        # First use of the stream. Concurrent first users both insert; one wins and
        # the other's ON CONFLICT DO NOTHING waits for it, then both lock the row.
        conn.execute(
            "INSERT INTO stream_retention (tenant_id, catalog_id, history_epoch)"
            " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            _key(stream),
        )
        row = conn.execute(select, _key(stream)).fetchone()
        assert row is not None
    return int(row[0])


def pruned_through(conn: psycopg.Connection, stream: StreamId) -> int:
    """The pruned-through position without locking (0 for a stream never pruned)."""
    row = conn.execute(
        f"SELECT pruned_through FROM stream_retention WHERE {_WHERE_STREAM}", _key(stream)
    ).fetchone()
    return int(row[0]) if row else 0


def committed_position(conn: psycopg.Connection, stream: StreamId) -> int:
    """The committed cursor, read without locking it (writers are never waited for)."""
    row = conn.execute(
        f"SELECT position FROM stream_cursor WHERE {_WHERE_STREAM}", _key(stream)
    ).fetchone()
    return int(row[0]) if row else 0


# Consumers ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerRow:
    stream: StreamId
    consumer_id: str
    reported_position: int | None
    registered_at: datetime
    reported_at: datetime | None
    # Set when a first report fell below pruned-through (see ``mark_needs_rebuild``).
    needs_rebuild_since: datetime | None = None
    refused_position: int | None = None
    # When a report last raised ``reported_position``.
    progressed_at: datetime | None = None
    # Seconds since the oldest retained event above its progress was committed: how
    # far behind it is in time (None: nothing above its progress is retained).
    waiting_age_s: float | None = None
    # Seconds its progress has not moved while events wait: since the later of its
    # last progress (or registration) and the oldest waiting event's commit.
    unchanged_s: float | None = None


# The consumer's columns, and its ages from the first retained outbox row above its
# progress (a primary-key lookup per consumer row, ``w``).
_CONSUMER_COLUMNS = (
    "sc.tenant_id, sc.catalog_id, sc.history_epoch, sc.consumer_id, sc.reported_position,"
    " sc.registered_at, sc.reported_at, sc.needs_rebuild_since, sc.refused_position,"
    " sc.progressed_at, extract(epoch FROM clock_timestamp() - w.committed_at),"
    " CASE WHEN w.committed_at IS NOT NULL THEN extract(epoch FROM clock_timestamp()"
    "  - greatest(coalesce(sc.progressed_at, sc.registered_at), w.committed_at)) END"
)
_CONSUMER_FROM = (
    "stream_consumer sc LEFT JOIN LATERAL (SELECT o.committed_at FROM outbox o"
    " WHERE o.tenant_id = sc.tenant_id AND o.catalog_id = sc.catalog_id"
    " AND o.history_epoch = sc.history_epoch"
    " AND o.position > coalesce(sc.reported_position, 0)"
    " ORDER BY o.position LIMIT 1) w ON true"
)
_WHERE_SC = "sc.tenant_id = %s AND sc.catalog_id = %s AND sc.history_epoch = %s"


def _seconds(value: Any) -> float | None:
    return None if value is None else max(0.0, float(value))


def _consumer(row: tuple[Any, ...]) -> ConsumerRow:
    t, c, e, consumer_id, reported, registered_at, reported_at, since, refused = row[:9]
    progressed_at, waiting, unchanged = row[9:]
    return ConsumerRow(
        StreamId(str(t), str(c), int(e)),
        str(consumer_id),
        None if reported is None else int(reported),
        registered_at,
        reported_at,
        since,
        None if refused is None else int(refused),
        progressed_at,
        _seconds(waiting),
        _seconds(unchanged),
    )


def _one_consumer(conn: psycopg.Connection, stream: StreamId, consumer_id: str) -> ConsumerRow:
    row = conn.execute(
        f"SELECT {_CONSUMER_COLUMNS} FROM {_CONSUMER_FROM}"
        f" WHERE {_WHERE_SC} AND sc.consumer_id = %s",
        (*_key(stream), consumer_id),
    ).fetchone()
    assert row is not None
    return _consumer(row)


def ensure_consumer(conn: psycopg.Connection, stream: StreamId, consumer_id: str) -> ConsumerRow:
    """Register the consumer if it is not yet (call under the retention lock)."""
    conn.execute(
        "INSERT INTO stream_consumer (tenant_id, catalog_id, history_epoch, consumer_id)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (*_key(stream), consumer_id),
    )
    return _one_consumer(conn, stream, consumer_id)


def raise_progress(
    conn: psycopg.Connection,
    stream: StreamId,
    consumer_id: str,
    position: int,
    *,
    known_only: bool = False,
) -> int | None:
    """Move a registered consumer's progress forward to ``position``; a lower report
    changes nothing, and a refusal on record is cleared. Returns the progress now
    held, or None if not registered (with ``known_only``: or if it never reported)."""
    known = " AND reported_position IS NOT NULL" if known_only else ""
    row = conn.execute(
        "UPDATE stream_consumer"
        " SET reported_position = GREATEST(reported_position, %s), reported_at = clock_timestamp(),"
        " progressed_at = CASE WHEN reported_position IS NULL OR %s > reported_position"
        "  THEN clock_timestamp() ELSE progressed_at END,"
        " needs_rebuild_since = NULL, refused_position = NULL"
        f" WHERE {_WHERE_STREAM} AND consumer_id = %s{known} RETURNING reported_position",
        (position, position, *_key(stream), consumer_id),
    ).fetchone()
    return None if row is None else int(row[0])


def mark_needs_rebuild(
    conn: psycopg.Connection, stream: StreamId, consumer_id: str, position: int
) -> ConsumerRow:
    """Record that the consumer reported ``position`` below pruned-through while its
    progress was unknown (call under the retention lock, the row ensured). The first
    refusal's time is kept; the position is the latest refused."""
    conn.execute(
        "UPDATE stream_consumer SET refused_position = %s,"
        " needs_rebuild_since = coalesce(needs_rebuild_since, clock_timestamp())"
        f" WHERE {_WHERE_STREAM} AND consumer_id = %s",
        (position, *_key(stream), consumer_id),
    )
    return _one_consumer(conn, stream, consumer_id)


# Standing consumers -----------------------------------------------------------------

# The advisory lock that orders standing-consumer declarations against prune
# batches: each batch holds it shared for its transaction, a declaration or a
# retirement exclusively. A declaration therefore waits for the batches in flight
# and every later batch sees it, so from its commit on no stream is pruned past it.
# (The key is arbitrary but fixed: "gapless standing consumers".)
_STANDING_LOCK = 0x6761706C_5354
assert _STANDING_LOCK < 2**63


def lock_standing_shared(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (_STANDING_LOCK,))


def lock_standing_exclusive(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_STANDING_LOCK,))


@dataclass(frozen=True, slots=True)
class StandingConsumerRow:
    consumer_id: str
    declared_at: datetime
    declared_by: str


def standing_consumers(conn: psycopg.Connection) -> list[StandingConsumerRow]:
    rows = conn.execute(
        "SELECT consumer_id, declared_at, declared_by FROM standing_consumer ORDER BY consumer_id"
    ).fetchall()
    return [StandingConsumerRow(str(c), at, str(by)) for c, at, by in rows]


def insert_standing(conn: psycopg.Connection, consumer_id: str, declared_by: str) -> bool:
    """Declare a standing consumer; False if it already stands (call under the
    exclusive standing lock)."""
    cur = conn.execute(
        "INSERT INTO standing_consumer (consumer_id, declared_by) VALUES (%s, %s)"
        " ON CONFLICT DO NOTHING",
        (consumer_id, declared_by),
    )
    return cur.rowcount > 0


def delete_standing(conn: psycopg.Connection, consumer_id: str) -> bool:
    cur = conn.execute("DELETE FROM standing_consumer WHERE consumer_id = %s", (consumer_id,))
    return cur.rowcount > 0


def delete_consumer(conn: psycopg.Connection, stream: StreamId, consumer_id: str) -> bool:
    cur = conn.execute(
        f"DELETE FROM stream_consumer WHERE {_WHERE_STREAM} AND consumer_id = %s",
        (*_key(stream), consumer_id),
    )
    return cur.rowcount > 0


def consumers(conn: psycopg.Connection, stream: StreamId | None = None) -> list[ConsumerRow]:
    """The registered consumers of one stream, or of every stream."""
    where, params = (f" WHERE {_WHERE_SC}", _key(stream)) if stream else ("", ())
    rows = conn.execute(
        f"SELECT {_CONSUMER_COLUMNS} FROM {_CONSUMER_FROM}{where}"
        " ORDER BY sc.tenant_id, sc.catalog_id, sc.history_epoch, sc.consumer_id",
        params,
    ).fetchall()
    return [_consumer(r) for r in rows]


# Leases ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseRow:
    lease_id: uuid.UUID
    stream: StreamId
    holder: str
    pinned_position: int
    ttl_seconds: int
    created_at: datetime
    expires_at: datetime
    released_at: datetime | None
    # Seconds until ``expires_at`` by the database clock when the row was read;
    # zero or less means expired.
    seconds_left: float

    @property
    def expired(self) -> bool:
        return self.seconds_left <= 0


_LEASE_COLUMNS = (
    "lease_id, tenant_id, catalog_id, history_epoch, holder, pinned_position, ttl_seconds,"
    " created_at, expires_at, released_at,"
    " extract(epoch FROM expires_at - clock_timestamp())::float8"
)


def _lease(row: tuple[Any, ...]) -> LeaseRow:
    lease_id, t, c, e, holder, pin, ttl, created, expires, released, left = row
    return LeaseRow(
        lease_id,
        StreamId(str(t), str(c), int(e)),
        str(holder),
        int(pin),
        int(ttl),
        created,
        expires,
        released,
        float(left),
    )


def insert_lease(
    conn: psycopg.Connection,
    stream: StreamId,
    lease_id: uuid.UUID,
    holder: str,
    pinned_position: int,
    ttl_seconds: int,
) -> LeaseRow:
    """Insert a lease expiring ``ttl_seconds`` from now (call under the retention lock)."""
    row = conn.execute(
        "INSERT INTO rebuild_lease (lease_id, tenant_id, catalog_id, history_epoch, holder,"
        " pinned_position, ttl_seconds, expires_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, clock_timestamp() + make_interval(secs => %s))"
        f" RETURNING {_LEASE_COLUMNS}",
        (lease_id, *_key(stream), holder, pinned_position, ttl_seconds, ttl_seconds),
    ).fetchone()
    assert row is not None
    return _lease(row)


def get_lease(conn: psycopg.Connection, lease_id: uuid.UUID) -> LeaseRow | None:
    row = conn.execute(
        f"SELECT {_LEASE_COLUMNS} FROM rebuild_lease WHERE lease_id = %s", (lease_id,)
    ).fetchone()
    return None if row is None else _lease(row)


def extend_lease(conn: psycopg.Connection, lease_id: uuid.UUID, ttl_seconds: int) -> LeaseRow:
    """Set the lease to expire ``ttl_seconds`` from now (the caller checked it is live)."""
    row = conn.execute(
        "UPDATE rebuild_lease SET ttl_seconds = %s,"
        " expires_at = clock_timestamp() + make_interval(secs => %s)"
        f" WHERE lease_id = %s RETURNING {_LEASE_COLUMNS}",
        (ttl_seconds, ttl_seconds, lease_id),
    ).fetchone()
    assert row is not None
    return _lease(row)


def raise_pin(conn: psycopg.Connection, lease_id: uuid.UUID, position: int) -> LeaseRow:
    """Move the pin forward to ``position``; a lower one changes nothing."""
    row = conn.execute(
        "UPDATE rebuild_lease SET pinned_position = GREATEST(pinned_position, %s)"
        f" WHERE lease_id = %s RETURNING {_LEASE_COLUMNS}",
        (position, lease_id),
    ).fetchone()
    assert row is not None
    return _lease(row)


def mark_released(conn: psycopg.Connection, lease_id: uuid.UUID) -> None:
    conn.execute(
        "UPDATE rebuild_lease SET released_at = clock_timestamp()"
        " WHERE lease_id = %s AND released_at IS NULL",
        (lease_id,),
    )


def unreleased_leases(conn: psycopg.Connection, stream: StreamId | None = None) -> list[LeaseRow]:
    """Leases not released, expired ones included (see ``LeaseRow.expired``)."""
    where, params = (f" AND {_WHERE_STREAM}", _key(stream)) if stream else ("", ())
    rows = conn.execute(
        f"SELECT {_LEASE_COLUMNS} FROM rebuild_lease WHERE released_at IS NULL{where}"
        " ORDER BY tenant_id, catalog_id, history_epoch, expires_at",
        params,
    ).fetchall()
    return [_lease(r) for r in rows]


# Pruning --------------------------------------------------------------------------


def prunable_streams(conn: psycopg.Connection, fenced_seconds: float) -> list[StreamId]:
    """Streams a prune pass may shorten: live ones with published events above their
    pruned-through position, and fenced ones whose ``fenced_seconds`` since the fence
    are over (by the database clock) with rows left above it. A fenced stream still
    kept as history is left out."""
    rows = conn.execute(
        "SELECT p.tenant_id, p.catalog_id, p.history_epoch FROM stream_publication p"
        " LEFT JOIN stream_retention r USING (tenant_id, catalog_id, history_epoch)"
        " LEFT JOIN stream_cursor c USING (tenant_id, catalog_id, history_epoch)"
        " WHERE p.published_position > coalesce(r.pruned_through, 0) AND c.fenced_at IS NULL"
        " UNION"
        " SELECT c.tenant_id, c.catalog_id, c.history_epoch FROM stream_cursor c"
        " LEFT JOIN stream_retention r USING (tenant_id, catalog_id, history_epoch)"
        " WHERE c.fenced_at IS NOT NULL AND c.position > coalesce(r.pruned_through, 0)"
        " AND c.fenced_at <= clock_timestamp() - make_interval(secs => %s)"
        " ORDER BY 1, 2, 3",
        (fenced_seconds,),
    ).fetchall()
    return [StreamId(t, c, int(e)) for t, c, e in rows]


@dataclass(frozen=True, slots=True)
class FenceState:
    """A fenced stream as retention sees it."""

    fenced_at: datetime
    history_end: int
    """Its committed cursor: no row lies above it, and none will (it takes no writes)."""
    kept_until: datetime
    kept: bool
    """Its retention period since the fence is not over (by the database clock)."""


def fence_state(
    conn: psycopg.Connection, stream: StreamId, fenced_seconds: float
) -> FenceState | None:
    """The stream's fence, or None for a live stream. The cursor row is read without
    locking it: retention never waits for writers (and a fenced one has none)."""
    row = conn.execute(
        "SELECT fenced_at, position, fenced_at + make_interval(secs => %s),"
        " fenced_at + make_interval(secs => %s) > clock_timestamp()"
        f" FROM stream_cursor WHERE {_WHERE_STREAM} AND fenced_at IS NOT NULL",
        (fenced_seconds, fenced_seconds, *_key(stream)),
    ).fetchone()
    if row is None:
        return None
    fenced_at, end, until, kept = row
    return FenceState(fenced_at, int(end), until, bool(kept))


def first_younger_than(
    conn: psycopg.Connection, stream: StreamId, after: int, through: int, age_seconds: float
) -> int | None:
    """The first position in ``(after, through]`` committed less than ``age_seconds``
    ago, or None if every row of the range is at least that old."""
    row = conn.execute(
        "SELECT min(position) FROM outbox"
        f" WHERE {_WHERE_STREAM} AND position > %s AND position <= %s"
        " AND committed_at > clock_timestamp() - make_interval(secs => %s)",
        (*_key(stream), after, through, age_seconds),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def delete_range(conn: psycopg.Connection, stream: StreamId, after: int, through: int) -> int:
    """Delete the outbox rows at positions ``(after, through]``; returns how many."""
    cur = conn.execute(
        f"DELETE FROM outbox WHERE {_WHERE_STREAM} AND position > %s AND position <= %s",
        (*_key(stream), after, through),
    )
    return cur.rowcount


def set_pruned_through(conn: psycopg.Connection, stream: StreamId, position: int) -> None:
    conn.execute(
        "UPDATE stream_retention SET pruned_through = %s, updated_at = clock_timestamp()"
        f" WHERE {_WHERE_STREAM}",
        (position, *_key(stream)),
    )
