"""The operator's view and repair path for parked events: list, retry, skip.

A parked event waits for a dependency to be applied and holds its stream's progress
meanwhile. Normally the event that applies the dependency releases it; when that
never comes, an operator sees what each one waits on and either retries it (after
what it waits on was applied some other way) or skips it with an audited reason. A
skip moves the event to quarantine and skips that entry in one transaction, so the
decision sits with every other skip (`gapless quarantine list --status skipped`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg

from processors.applier import progress
from processors.applier.batch import Applier
from processors.applier.exceptions import ParkedEventNotFound, SkipReasonRequired
from processors.applier.quarantine import DEPENDENCY_NOT_APPLIED, SetAside, set_aside
from processors.applier.repair import Skipped, skip_in
from processors.projections import registry
from schemas.codec import CODEC, EventCodec


@dataclass(frozen=True, slots=True)
class Dependency:
    """One aggregate revision a parked event waits for, and what is applied now."""

    aggregate_type: str
    aggregate_id: str
    revision: int
    applied: int | None

    def __str__(self) -> str:
        now = "never applied" if self.applied is None else f"applied {self.applied}"
        return f"{self.aggregate_type} {self.aggregate_id}@{self.revision} ({now})"


@dataclass(frozen=True, slots=True)
class ParkedEvent:
    event_id: uuid.UUID
    stream: progress.Stream
    position: int
    event_type: str
    parked_at: datetime
    topic: str | None
    partition: int | None
    offset: int | None
    waits_on: tuple[Dependency, ...]


def list_parked(
    conn: psycopg.Connection,
    consumer: str,
    stream: progress.Stream | None = None,
    older_than: timedelta | None = None,
    event_ids: list[uuid.UUID] | None = None,
) -> list[ParkedEvent]:
    """Parked events (of one stream, parked longer than ``older_than``), oldest
    position first, each with the revisions it waits for and what ``consumer``'s
    serving generation has applied of them."""
    where = ["pe.consumer = %s"]
    params: list[object] = [consumer]
    if stream is not None:
        where.append("pe.tenant_id = %s AND pe.catalog_id = %s AND pe.history_epoch = %s")
        params.extend(stream)
    if older_than is not None:
        where.append("pe.parked_at < now() - %s")
        params.append(older_than)
    if event_ids is not None:
        where.append("pe.event_id = ANY(%s)")
        params.append(event_ids)
    rows = conn.execute(
        "SELECT pe.event_id, pe.tenant_id, pe.catalog_id, pe.history_epoch, pe.position,"
        " coalesce(i.event_type, 'unknown'), pe.parked_at, pe.topic, pe.partition, pe.\"offset\","
        " coalesce(sp.generation, 1),"
        " coalesce(array_agg(d.aggregate_type ORDER BY d.aggregate_type, d.aggregate_id)"
        "  FILTER (WHERE d.event_id IS NOT NULL), '{}'),"
        " coalesce(array_agg(d.aggregate_id ORDER BY d.aggregate_type, d.aggregate_id)"
        "  FILTER (WHERE d.event_id IS NOT NULL), '{}'),"
        " coalesce(array_agg(d.revision ORDER BY d.aggregate_type, d.aggregate_id)"
        "  FILTER (WHERE d.event_id IS NOT NULL), '{}')"
        " FROM parked_event pe"
        " LEFT JOIN inbox i ON i.consumer = pe.consumer AND i.event_id = pe.event_id"
        " LEFT JOIN parked_dependency d ON d.consumer = pe.consumer AND d.event_id = pe.event_id"
        " LEFT JOIN stream_progress sp ON sp.consumer = %s AND sp.tenant_id = pe.tenant_id"
        " AND sp.catalog_id = pe.catalog_id AND sp.history_epoch = pe.history_epoch"
        f" WHERE {' AND '.join(where)}"
        " GROUP BY pe.consumer, pe.event_id, i.event_type, sp.generation"
        " ORDER BY pe.tenant_id, pe.catalog_id, pe.history_epoch, pe.position",
        [consumer, *params],
    ).fetchall()
    keys: dict[int, set[tuple[str, str, str, str]]] = {}
    for r in rows:
        keys.setdefault(int(r[10]), set()).update(
            (r[1], r[2], ty, i) for ty, i in zip(r[11], r[12], strict=True)
        )
    applied: dict[tuple[int, tuple[str, str, str, str]], int] = {}
    for generation, wanted in keys.items():
        for key, revision in registry.load_revisions(conn, generation, wanted).items():
            applied[(generation, key)] = revision
    return [
        ParkedEvent(
            r[0],
            (r[1], r[2], int(r[3])),
            int(r[4]),
            r[5],
            r[6],
            r[7],
            r[8],
            r[9],
            tuple(
                Dependency(ty, i, int(rev), applied.get((int(r[10]), (r[1], r[2], ty, i))))
                for ty, i, rev in zip(r[11], r[12], r[13], strict=True)
            ),
        )
        for r in rows
    ]


def parked_value(conn: psycopg.Connection, consumer: str, event_id: uuid.UUID) -> bytes | None:
    """The message value a parked event was parked with (for an operator to read;
    nothing is locked); None if ``consumer`` has no such parked event."""
    row = conn.execute(
        "SELECT value FROM parked_event WHERE consumer = %s AND event_id = %s",
        (consumer, event_id),
    ).fetchone()
    return None if row is None else bytes(row[0])


def retry(applier: Applier, event_ids: list[uuid.UUID]) -> dict[uuid.UUID, str | None]:
    """Look at parked events again (``Applier.release_parked``, one transaction).

    Each id maps to its outcome when released (``applied``, ``ignored_stale``), or to
    None when it still waits. An id that is not parked raises ``ParkedEventNotFound``
    before anything is tried.
    """
    with psycopg.connect(applier.product_dsn) as conn:
        found = {p.event_id for p in list_parked(conn, applier.consumer, event_ids=event_ids)}
    missing = [str(i) for i in event_ids if i not in found]
    if missing:
        raise ParkedEventNotFound(
            f"not parked: {', '.join(missing)}; it may have been released or set aside"
            " (see `gapless parked list` and `gapless quarantine list`)"
        )
    released = applier.release_parked(event_ids)
    return {i: released.get(i) for i in event_ids}


def skip(
    product_dsn: str,
    consumer: str,
    event_id: uuid.UUID,
    reason: str,
    actor: str,
    codec: EventCodec = CODEC,
) -> tuple[int, Skipped]:
    """Give up a parked event with an audited reason; its entry id and what the skip did.

    One transaction, in this order:
    1. lock the stream's progress row (so no applier releases the event meanwhile);
    2. move the event to quarantine (``DEPENDENCY_NOT_APPLIED``, naming what it waits on);
    3. skip that entry (``repair.skip_in``: the position becomes ``skipped``, whatever
       waited on this event is set aside in turn, progress advances).
    A crash before COMMIT leaves the event parked.
    """
    if not reason.strip():
        raise SkipReasonRequired("a skip needs a reason (--reason)")
    with psycopg.connect(product_dsn) as conn:
        found = list_parked(conn, consumer, event_ids=[event_id])
        if not found:
            raise ParkedEventNotFound(
                f"no parked event {event_id}; see `gapless parked list`"
                " (a released or set-aside event is in `gapless quarantine list`)"
            )
        parked = found[0]
        progress.lock(
            conn,
            consumer,
            [parked.stream],
            generation=progress.bound_generation(conn, consumer),
        )
        waits = "; ".join(map(str, parked.waits_on)) or "nothing recorded"
        moved = set_aside(
            conn,
            consumer,
            [SetAside(event_id, DEPENDENCY_NOT_APPLIED, f"parked, waiting on {waits}")],
        )
        if event_id not in moved:
            raise ParkedEventNotFound(f"parked event {event_id} was released meanwhile")
        return moved[event_id], skip_in(conn, moved[event_id], reason, actor, codec)
