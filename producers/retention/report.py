"""What retention control holds, per stream: for ``gapless status``, the API and
metrics.

For each stream: the committed cursor, the published position, how far it is
pruned, the retention floor and what holds it (which consumer or lease, holding
back how many published positions), every consumer's progress and lag, and the
unreleased leases with the seconds left before they expire; and the same lags in
seconds: how long the oldest unpublished row has waited, how old the oldest event
each consumer has not applied is, and how long its progress has not moved while
events wait.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import psycopg

from db.resolver import retention as sql
from db.resolver import stream_positions as positions_sql
from producers.retention.rules import Holder, consumer_holders, lease_holder, retention_floor
from schemas.ids import StreamId


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    consumer_id: str
    reported_position: int | None
    # committed cursor minus reported progress (one that never reported lags by all of it)
    lag: int
    registered_at: datetime  # a standing consumer not registered here: when it was declared
    reported_at: datetime | None
    # Holding the stream as a standing consumer, without a registration of its own.
    standing: bool = False
    # Set when its first report fell below pruned-through: it needs a rebuild.
    needs_rebuild_since: datetime | None = None
    refused_position: int | None = None
    # Its lag in time: seconds since the oldest retained event above its progress
    # was committed, and seconds its progress has not moved while events wait (None:
    # nothing waits; also for a standing consumer not registered here).
    waiting_age_s: float | None = None
    unchanged_s: float | None = None


@dataclass(frozen=True, slots=True)
class LeaseState:
    lease_id: uuid.UUID
    holder: str
    pinned_position: int
    expires_at: datetime
    seconds_to_expiry: float  # zero or less: expired (it pins nothing any more)
    expired: bool


@dataclass(frozen=True, slots=True)
class StreamRetention:
    tenant_id: str
    catalog_id: str
    history_epoch: int
    committed: int
    published: int
    pruned_through: int
    # The retention floor: the lowest position a consumer or live lease lets the
    # pruner reach; None when nothing is registered and no lease is live.
    floor: int | None
    held_by: Holder | None
    # Published positions the floor keeps from being pruned (0: not blocking).
    held_back: int
    blocker: str | None
    consumers: list[ConsumerLag]
    leases: list[LeaseState]
    # Seconds the oldest unpublished row has waited for the relay (None: none waits,
    # or the stream is fenced).
    unpublished_age_s: float | None = None

    @property
    def stream(self) -> StreamId:
        return StreamId(self.tenant_id, self.catalog_id, self.history_epoch)


def _blocker(held_by: Holder | None, held_back: int, committed: int) -> str | None:
    if held_by is None or held_back <= 0:
        return None
    return (
        f"{held_by} holds back {held_back} published positions"
        f" ({committed - held_by.position} behind the committed cursor {committed})"
    )


def stream_report(
    conn: psycopg.Connection, stream: StreamId | None = None
) -> list[StreamRetention]:
    """The retention state of every stream (or of one), read in one transaction."""
    with conn.transaction():
        positions = positions_sql.stream_positions(conn, stream)
        standing = sql.standing_consumers(conn)
        consumers = defaultdict(list)
        for c in sql.consumers(conn, stream):
            consumers[c.stream].append(c)
        leases = defaultdict(list)
        for lease in sql.unreleased_leases(conn, stream):
            leases[lease.stream].append(lease)
    report = []
    for p in positions:
        own_consumers = consumers[p.stream]
        own_leases = leases[p.stream]
        registered = {c.consumer_id for c in own_consumers}
        unregistered = [x for x in standing if x.consumer_id not in registered]
        held_by = retention_floor(
            consumer_holders(own_consumers, unregistered)
            + [
                lease_holder(str(x.lease_id), x.holder, x.pinned_position)
                for x in own_leases
                if not x.expired
            ]
        )
        held_back = max(0, p.published - max(held_by.position, p.pruned_through)) if held_by else 0
        report.append(
            StreamRetention(
                tenant_id=p.stream.tenant_id,
                catalog_id=p.stream.catalog_id,
                history_epoch=p.stream.history_epoch,
                committed=p.committed,
                published=p.published,
                pruned_through=p.pruned_through,
                floor=held_by.position if held_by else None,
                held_by=held_by,
                held_back=held_back,
                blocker=_blocker(held_by, held_back, p.committed),
                consumers=[
                    ConsumerLag(
                        c.consumer_id,
                        c.reported_position,
                        max(0, p.committed - (c.reported_position or 0)),
                        c.registered_at,
                        c.reported_at,
                        needs_rebuild_since=c.needs_rebuild_since,
                        refused_position=c.refused_position,
                        waiting_age_s=c.waiting_age_s,
                        unchanged_s=c.unchanged_s,
                    )
                    for c in own_consumers
                ]
                + [
                    ConsumerLag(
                        x.consumer_id, None, p.committed, x.declared_at, None, standing=True
                    )
                    for x in unregistered
                ],
                leases=[
                    LeaseState(
                        x.lease_id,
                        x.holder,
                        x.pinned_position,
                        x.expires_at,
                        x.seconds_left,
                        x.expired,
                    )
                    for x in own_leases
                ],
                unpublished_age_s=p.unpublished_age_s,
            )
        )
    return report


def stream_page(
    conn: psycopg.Connection,
    tenants: frozenset[str] | None,
    after: StreamId | None,
    limit: int,
    catalog: str | None = None,
    matching: str | None = None,
) -> tuple[list[positions_sql.StreamPositions], bool]:
    """Up to ``limit`` streams of ``tenants`` (None: every tenant) after ``after``, in
    stream order, and whether more follow; only the ``catalog``'s and those whose
    ``tenant/catalog`` contains ``matching``, when given."""
    rows = positions_sql.stream_positions(
        conn,
        tenants=tenants,
        after=after,
        limit=limit + 1,
        catalog=catalog,
        matching=matching,
    )
    return rows[:limit], len(rows) > limit


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def as_json(s: StreamRetention) -> dict[str, Any]:
    """The stream's retention state as JSON-ready values (ISO times, string ids)."""
    return {k: _plain(v) for k, v in asdict(s).items()}
