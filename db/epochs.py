"""The trusted history epoch per tenant/catalog, read from the control database.

The epoch is never inferred from messages and never stored only in the resolver
database: after a resolver restore, the control database still says which history is
current (DESIGN §8).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

from db.exceptions import EpochNotIssued

FIRST_EPOCH = 1


def current_epochs(
    conn: psycopg.Connection, pairs: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """The current epoch of each (tenant, catalog) that has one."""
    wanted = sorted(set(pairs))
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT tenant_id, catalog_id, epoch FROM history_epoch"
        " WHERE (tenant_id, catalog_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
        ([t for t, _ in wanted], [c for _, c in wanted]),
    ).fetchall()
    return {(tenant, catalog): epoch for tenant, catalog, epoch in rows}


def ensure_epoch(conn: psycopg.Connection, tenant_id: str, catalog_id: str) -> int:
    """The current epoch, issuing the first one if this tenant/catalog has none yet.

    Runs in its own short transaction on the control database (autocommit callers) or
    the caller's; ``ON CONFLICT DO NOTHING`` makes concurrent first writers agree.
    """
    conn.execute(
        "INSERT INTO history_epoch (tenant_id, catalog_id, epoch, reason)"
        " VALUES (%s, %s, %s, 'first use') ON CONFLICT DO NOTHING",
        (tenant_id, catalog_id, FIRST_EPOCH),
    )
    conn.execute(
        "INSERT INTO history_epoch_log (tenant_id, catalog_id, epoch, reason)"
        " VALUES (%s, %s, %s, 'first use') ON CONFLICT DO NOTHING",
        (tenant_id, catalog_id, FIRST_EPOCH),
    )
    row = conn.execute(
        "SELECT epoch FROM history_epoch WHERE tenant_id = %s AND catalog_id = %s",
        (tenant_id, catalog_id),
    ).fetchone()
    assert row is not None
    return int(row[0])


@dataclass(frozen=True, slots=True)
class Issued:
    epoch: int
    """The catalog's current epoch now."""
    issued_now: bool
    """False when an earlier call already issued it (the call is idempotent)."""


def issue_next(
    conn: psycopg.Connection,
    tenant_id: str,
    catalog_id: str,
    superseded: int,
    issued_by: str,
    reason: str,
) -> Issued:
    """Issue the epoch after ``superseded`` for a restored catalog, in the caller's
    transaction on the control database (the only authority on epochs).

    1. lock the catalog's epoch row; 2. if it is still ``superseded``, move it to
    ``superseded + 1`` and log who, when, why and which epoch it fenced; if it is
    already past, change nothing (the same fence asked again); 3. the caller commits.
    Raises ``EpochNotIssued`` when the catalog has no epoch or ``superseded`` is
    ahead of it (nothing of that history exists to fence).
    """
    row = conn.execute(
        "SELECT epoch FROM history_epoch WHERE tenant_id = %s AND catalog_id = %s FOR UPDATE",
        (tenant_id, catalog_id),
    ).fetchone()
    if row is None or int(row[0]) < superseded:
        current = "none" if row is None else str(row[0])
        raise EpochNotIssued(
            f"{tenant_id}/{catalog_id} has no epoch {superseded} to fence (current: {current})"
        )
    if int(row[0]) > superseded:
        return Issued(int(row[0]), False)
    epoch = superseded + 1
    conn.execute(
        "UPDATE history_epoch SET epoch = %s, issued_at = now(), reason = %s"
        " WHERE tenant_id = %s AND catalog_id = %s",
        (epoch, reason, tenant_id, catalog_id),
    )
    conn.execute(
        "INSERT INTO history_epoch_log (tenant_id, catalog_id, epoch, reason, issued_by,"
        " superseded_epoch) VALUES (%s, %s, %s, %s, %s, %s)",
        (tenant_id, catalog_id, epoch, reason, issued_by, superseded),
    )
    return Issued(epoch, True)


class EpochSource:
    """Reads current epochs from the control database, caching them briefly.

    The cache only saves round trips on the hot path; a fence (DESIGN §8) pauses
    writers and consumers for longer than ``ttl_seconds`` before issuing a new epoch.
    """

    def __init__(self, control_dsn: str, ttl_seconds: float = 1.0) -> None:
        self._dsn = control_dsn
        self._ttl = ttl_seconds
        self._cache: dict[tuple[str, str], tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._dsn, autocommit=True)
        return self._conn

    def epoch_for_write(self, tenant_id: str, catalog_id: str) -> tuple[int, bool]:
        """The epoch a writer uses, and whether the control database has issued it.

        A tenant/catalog nobody has written yet reads as ``FIRST_EPOCH``, not issued:
        the writer issues it (``issue_first``) only once its write is accepted, so a
        refused request leaves the control database as it was.
        """
        key = (tenant_id, catalog_id)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
            if cached and now - cached[1] < self._ttl:
                return cached[0], True
            epoch = current_epochs(self._connection(), [key]).get(key)
            if epoch is None:
                return FIRST_EPOCH, False
            self._cache[key] = (epoch, now)
            return epoch, True

    def issue_first(self, tenant_id: str, catalog_id: str) -> int:
        """Issue the first epoch of a tenant/catalog (idempotent) and return the
        current one: another writer, or an operator, may have issued it first."""
        with self._lock:
            epoch = ensure_epoch(self._connection(), tenant_id, catalog_id)
            self._cache[(tenant_id, catalog_id)] = (epoch, time.monotonic())
            return epoch

    def epochs(
        self, pairs: Iterable[tuple[str, str]], refresh: bool = False
    ) -> dict[tuple[str, str], int]:
        """Current epochs for a consumer's batch; pairs without an epoch are absent.

        ``refresh`` bypasses the cache, for a second look before treating an epoch
        as unknown.
        """
        wanted = set(pairs)
        now = time.monotonic()
        with self._lock:
            found = {
                key: value[0]
                for key in wanted
                if not refresh and (value := self._cache.get(key)) and now - value[1] < self._ttl
            }
            missing = wanted - found.keys()
            if missing:
                fresh = current_epochs(self._connection(), missing)
                for key, epoch in fresh.items():
                    self._cache[key] = (epoch, now)
                found.update(fresh)
            return found

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
