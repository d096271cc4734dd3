"""The trusted history epoch per tenant/catalog, read from the control database.

The epoch is never inferred from messages and never stored only in the resolver
database: after a resolver restore, the control database still says which history is
current (DESIGN §8).

A restore nobody fenced is recorded here too: a stream of the current epoch whose
history went back under the running processes is flagged ``rewound_stream`` (by the
applier when a position it holds arrives under another event id, by the resolver
when a consumer reports progress above the committed cursor). While the flag is open
its writes are refused (``HISTORY_REWOUND``); the fence that issues the next epoch
clears it (``clear_rewound``).
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import psycopg

from db.exceptions import EpochNotIssued

FIRST_EPOCH = 1

POSITION_REUSED = "position_reused"
"""A consumer received an event at a position it holds under another event id."""
REPORT_BEYOND_COMMITTED = "report_beyond_committed"
"""A consumer reported progress above the stream's committed cursor."""


def fence_command(tenant_id: str, catalog_id: str, epoch: int) -> str:
    """The exact command that fixes a rewound stream: the fence its restore needed."""
    return (
        f"gapless fence-epoch --tenant {shlex.quote(tenant_id)}"
        f" --catalog {shlex.quote(catalog_id)} --epoch {epoch}"
        " --reason 'unfenced restore' --wait"
    )


@dataclass(frozen=True, slots=True)
class Rewound:
    """An open flag: the stream's history went back without a fence."""

    tenant_id: str
    catalog_id: str
    history_epoch: int
    signal: str
    detail: str
    flagged_at: datetime

    @property
    def fix(self) -> str:
        return fence_command(self.tenant_id, self.catalog_id, self.history_epoch)

    def describe(self) -> str:
        return (
            f"{self.tenant_id}/{self.catalog_id}@{self.history_epoch} was flagged rewound"
            f" at {self.flagged_at:%Y-%m-%d %H:%M:%S} ({self.signal}: {self.detail});"
            f" its history went back without a fence. Fix: {self.fix}"
        )


@dataclass(frozen=True, slots=True)
class EpochState:
    epoch: int
    """The catalog's current epoch."""
    rewound: Rewound | None
    """The open flag of the current epoch's stream, if any."""


_REWOUND_COLUMNS = "r.tenant_id, r.catalog_id, r.history_epoch, r.signal, r.detail, r.flagged_at"


def current_states(
    conn: psycopg.Connection, pairs: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], EpochState]:
    """The current epoch of each (tenant, catalog) that has one, with its stream's
    open rewound flag: one statement (the flag table is empty unless something went
    wrong, so the join costs nothing on the hot path)."""
    wanted = sorted(set(pairs))
    if not wanted:
        return {}
    rows = conn.execute(
        f"SELECT h.tenant_id, h.catalog_id, h.epoch, {_REWOUND_COLUMNS} FROM history_epoch h"
        " LEFT JOIN rewound_stream r ON r.tenant_id = h.tenant_id"
        " AND r.catalog_id = h.catalog_id AND r.history_epoch = h.epoch"
        " AND r.cleared_at IS NULL"
        " WHERE (h.tenant_id, h.catalog_id) IN (SELECT * FROM unnest(%b::text[], %b::text[]))",
        ([t for t, _ in wanted], [c for _, c in wanted]),
    ).fetchall()
    return {
        (tenant, catalog): EpochState(
            int(epoch),
            Rewound(rt, rc, int(re), signal, detail, at) if rt is not None else None,
        )
        for tenant, catalog, epoch, rt, rc, re, signal, detail, at in rows
    }


def flag_rewound(
    conn: psycopg.Connection,
    tenant_id: str,
    catalog_id: str,
    epoch: int,
    signal: str,
    detail: str,
) -> bool:
    """Flag the stream ``epoch`` of a catalog rewound; True if this call flagged it.

    Idempotent: a stream already flagged keeps its first flag (the first signal is
    what an operator wants to read). Only the catalog's current epoch is flagged: an
    older one is fenced already and takes no writes. The catalog's epoch row is read
    ``FOR SHARE``, which waits for a fence issuing the next epoch (``issue_next``
    locks it ``FOR UPDATE``) and then sees the new epoch, so a flag never lands on an
    epoch a concurrent fence has just superseded and cleared. One statement, in the
    caller's transaction (autocommit: its own).
    """
    row = conn.execute(
        "WITH current AS (SELECT epoch FROM history_epoch WHERE tenant_id = %(t)s"
        "  AND catalog_id = %(c)s FOR SHARE)"
        " INSERT INTO rewound_stream (tenant_id, catalog_id, history_epoch, signal, detail)"
        " SELECT %(t)s, %(c)s, %(e)s, %(signal)s, %(detail)s FROM current"
        " WHERE current.epoch = %(e)s"
        " ON CONFLICT (tenant_id, catalog_id, history_epoch) DO NOTHING RETURNING 1",
        {"t": tenant_id, "c": catalog_id, "e": epoch, "signal": signal, "detail": detail[:2000]},
    ).fetchone()
    return row is not None


def clear_rewound(
    conn: psycopg.Connection, tenant_id: str, catalog_id: str, below: int, cleared_by: str
) -> int:
    """Close the open flags of the catalog's epochs below ``below`` (the epoch a fence
    just issued); how many. In the caller's transaction: the fence runs it with
    ``issue_next``, so the new epoch and the cleared flags commit together."""
    return conn.execute(
        "UPDATE rewound_stream SET cleared_at = now(), cleared_by = %s"
        " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch < %s"
        " AND cleared_at IS NULL",
        (cleared_by, tenant_id, catalog_id, below),
    ).rowcount


def rewound_now(conn: psycopg.Connection) -> list[Rewound]:
    """Every open flag on a catalog's current epoch (what ``gapless status``, the
    metrics and the alert show), in stream order."""
    rows = conn.execute(
        f"SELECT {_REWOUND_COLUMNS} FROM rewound_stream r JOIN history_epoch h"
        " ON h.tenant_id = r.tenant_id AND h.catalog_id = r.catalog_id"
        " AND h.epoch = r.history_epoch WHERE r.cleared_at IS NULL"
        " ORDER BY r.tenant_id, r.catalog_id, r.history_epoch"
    ).fetchall()
    return [Rewound(t, c, int(e), signal, detail, at) for t, c, e, signal, detail, at in rows]


def current_epochs(
    conn: psycopg.Connection, pairs: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """The current epoch of each (tenant, catalog) that has one."""
    wanted = sorted(set(pairs))
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT tenant_id, catalog_id, epoch FROM history_epoch"
        " WHERE (tenant_id, catalog_id) IN (SELECT * FROM unnest(%b::text[], %b::text[]))",
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
    Each cached epoch carries its stream's rewound flag (``current_states``), so a
    flag raised in another process is seen within ``ttl_seconds`` at no extra cost.
    """

    def __init__(self, control_dsn: str, ttl_seconds: float = 1.0) -> None:
        self._dsn = control_dsn
        self._ttl = ttl_seconds
        self._cache: dict[tuple[str, str], tuple[EpochState, float]] = {}
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._dsn, autocommit=True)
        return self._conn

    def _states(
        self, pairs: Iterable[tuple[str, str]], refresh: bool = False
    ) -> dict[tuple[str, str], EpochState]:
        """Cached states of ``pairs`` (fresh ones read for the rest); the caller holds
        the lock. Pairs without an epoch are absent."""
        wanted = set(pairs)
        now = time.monotonic()
        found = {
            key: value[0]
            for key in wanted
            if not refresh and (value := self._cache.get(key)) and now - value[1] < self._ttl
        }
        missing = wanted - found.keys()
        if missing:
            fresh = current_states(self._connection(), missing)
            for key, state in fresh.items():
                self._cache[key] = (state, now)
            found.update(fresh)
        return found

    def _state(self, key: tuple[str, str]) -> EpochState | None:
        """``_states`` of one pair, without building sets for it when it is cached
        (a writer asks twice a unit of work); the caller holds the lock."""
        cached = self._cache.get(key)
        if cached is not None and time.monotonic() - cached[1] < self._ttl:
            return cached[0]
        return self._states([key]).get(key)

    def epoch_for_write(self, tenant_id: str, catalog_id: str) -> tuple[int, bool]:
        """The epoch a writer uses, and whether the control database has issued it.

        A tenant/catalog nobody has written yet reads as ``FIRST_EPOCH``, not issued:
        the writer issues it (``issue_first``) only once its write is accepted, so a
        refused request leaves the control database as it was.
        """
        with self._lock:
            state = self._state((tenant_id, catalog_id))
        return (FIRST_EPOCH, False) if state is None else (state.epoch, True)

    def issue_first(self, tenant_id: str, catalog_id: str) -> int:
        """Issue the first epoch of a tenant/catalog (idempotent) and return the
        current one: another writer, or an operator, may have issued it first."""
        key = (tenant_id, catalog_id)
        with self._lock:
            epoch = ensure_epoch(self._connection(), tenant_id, catalog_id)
            self._states([key], refresh=True)
            return epoch

    def epochs(
        self, pairs: Iterable[tuple[str, str]], refresh: bool = False
    ) -> dict[tuple[str, str], int]:
        """Current epochs for a consumer's batch; pairs without an epoch are absent.

        ``refresh`` bypasses the cache, for a second look before treating an epoch
        as unknown.
        """
        with self._lock:
            return {key: state.epoch for key, state in self._states(pairs, refresh).items()}

    def rewound(self, tenant_id: str, catalog_id: str, epoch: int) -> Rewound | None:
        """The open rewound flag of the stream, if ``epoch`` is the catalog's current
        one and is flagged (cached like the epoch: a flag raised elsewhere shows within
        ``ttl_seconds``; an older epoch is fenced, so never answers here)."""
        with self._lock:
            state = self._state((tenant_id, catalog_id))
        if state is None or state.epoch != epoch:
            return None
        return state.rewound

    def flag_rewound(
        self, tenant_id: str, catalog_id: str, epoch: int, signal: str, detail: str
    ) -> Rewound | None:
        """Flag the stream rewound (``flag_rewound``, idempotent) and return its open
        flag as this process now sees it (None: ``epoch`` is not the current one, so
        there is nothing to flag)."""
        key = (tenant_id, catalog_id)
        with self._lock:
            flag_rewound(self._connection(), tenant_id, catalog_id, epoch, signal, detail)
            state = self._states([key], refresh=True).get(key)
        if state is None or state.epoch != epoch:
            return None
        return state.rewound

    def rewound_now(self) -> list[Rewound]:
        """Every open flag on a current epoch, read afresh (status and metrics)."""
        with self._lock:
            return rewound_now(self._connection())

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
