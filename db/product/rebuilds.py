"""Shadow rebuild SQL (product database): the rebuild rows and the shadow's start.

Every function runs in the caller's transaction; ``processors.rebuild`` decides
where transactions begin and end and which phase may follow which.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from db.exceptions import RebuildClaimLost
from schemas.ids import StreamId


@dataclass(frozen=True, slots=True)
class RebuildRow:
    rebuild_id: uuid.UUID
    consumer: str
    stream: StreamId
    phase: str
    attempt: int
    shadow_consumer: str
    generation: int | None
    lease_id: uuid.UUID | None
    export_id: uuid.UUID | None
    export_position: int | None
    target_position: int | None
    chunks_total: int
    chunks_loaded: int
    rows_loaded: int
    requested_by: str
    reason: str
    error_code: str | None
    error_message: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    caught_up_position: int | None
    previous_generation: int | None
    cutover_pause_ms: float | None
    timings: dict[str, float]
    cleaned_at: datetime | None
    claimed_by: str | None = None
    # The load's progress (``processors.rebuild.progress``): the export's records once
    # its manifest is read, its count of each kind, and per kind the rows loaded so
    # far with the seconds their chunks took ({"rows": n, "seconds": s}).
    rows_total: int | None = None
    rows_by_kind: dict[str, int] = field(default_factory=dict)
    load_cost: dict[str, dict[str, float]] = field(default_factory=dict)
    phase_started_at: datetime | None = None
    loaded_chunks: tuple[int, ...] = ()
    """The numbers of the export's chunks loaded so far (``chunks_loaded`` of them)."""
    live_position: int | None = None
    """The live consumer's progress of the stream when the row was read: where the
    catch-up will have to reach at least (not a column: read with the row)."""


_COLUMNS = (
    "rebuild_id, consumer, tenant_id, catalog_id, history_epoch, phase, attempt,"
    " shadow_consumer, generation, lease_id, export_id, export_position, target_position,"
    " chunks_total, chunks_loaded, rows_loaded, requested_by, reason, error_code,"
    " error_message, created_at, updated_at, finished_at, caught_up_position,"
    " previous_generation, cutover_pause_ms, timings, cleaned_at, claimed_by,"
    " rows_total, rows_by_kind, load_cost, phase_started_at, loaded_chunks,"
    " (SELECT p.position FROM stream_progress p WHERE p.consumer = rebuild.consumer"
    " AND p.tenant_id = rebuild.tenant_id AND p.catalog_id = rebuild.catalog_id"
    " AND p.history_epoch = rebuild.history_epoch)"
)


def _row(r: tuple[Any, ...]) -> RebuildRow:
    rebuild_id, consumer, t, c, e, *rest = r
    rest[-2] = tuple(rest[-2] or ())  # loaded_chunks: an array
    return RebuildRow(rebuild_id, consumer, StreamId(t, c, int(e)), *rest)


def insert(
    conn: psycopg.Connection,
    rebuild_id: uuid.UUID,
    consumer: str,
    stream: StreamId,
    shadow_consumer: str,
    requested_by: str,
    reason: str,
) -> RebuildRow | None:
    """Record a request; None if this id is already recorded (a redelivery). Raises
    ``psycopg.errors.UniqueViolation`` if another rebuild of the catalog is active."""
    row = conn.execute(
        "INSERT INTO rebuild (rebuild_id, consumer, tenant_id, catalog_id, history_epoch,"
        " shadow_consumer, requested_by, reason) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
        f" ON CONFLICT (rebuild_id) DO NOTHING RETURNING {_COLUMNS}",
        (rebuild_id, consumer, *stream, shadow_consumer, requested_by, reason),
    ).fetchone()
    return None if row is None else _row(row)


def get(
    conn: psycopg.Connection, rebuild_id: uuid.UUID, *, lock: bool = False
) -> RebuildRow | None:
    suffix = " FOR UPDATE" if lock else ""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM rebuild WHERE rebuild_id = %s{suffix}", (rebuild_id,)
    ).fetchone()
    return None if row is None else _row(row)


def active_for(
    conn: psycopg.Connection, consumer: str, tenant_id: str, catalog_id: str
) -> RebuildRow | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM rebuild WHERE consumer = %s AND tenant_id = %s"
        " AND catalog_id = %s AND phase NOT IN ('done', 'failed', 'cancelled')",
        (consumer, tenant_id, catalog_id),
    ).fetchone()
    return None if row is None else _row(row)


def done_since_epoch(
    conn: psycopg.Connection, consumer: str, tenant_id: str, catalog_id: str, epoch: int
) -> RebuildRow | None:
    """The catalog's first rebuild done at ``epoch`` or a later one, if any."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM rebuild WHERE consumer = %s AND tenant_id = %s"
        " AND catalog_id = %s AND history_epoch >= %s AND phase = 'done'"
        " ORDER BY finished_at LIMIT 1",
        (consumer, tenant_id, catalog_id, epoch),
    ).fetchone()
    return None if row is None else _row(row)


def recent(conn: psycopg.Connection, limit: int = 50) -> list[RebuildRow]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM rebuild ORDER BY created_at DESC LIMIT %s", (limit,)
    ).fetchall()
    return [_row(r) for r in rows]


_SETTABLE = frozenset(
    {
        "generation",
        "lease_id",
        "export_id",
        "export_position",
        "target_position",
        "chunks_total",
        "chunks_loaded",
        "loaded_chunks",
        "rows_loaded",
        "rows_total",
        "rows_by_kind",
        "load_cost",
        "attempt",
        "error_code",
        "error_message",
        "caught_up_position",
        "previous_generation",
        "cutover_pause_ms",
    }
)


def update(
    conn: psycopg.Connection, rebuild_id: uuid.UUID, phase: str, **changes: object
) -> RebuildRow:
    """Set the phase (and the named columns) whatever the phase is now (the caller
    holds the row locked and checked it, or is a test)."""
    row = _set(conn, rebuild_id, phase, changes, "", {})
    if row is None:
        raise LookupError(f"no rebuild {rebuild_id}")
    return row


def move(
    conn: psycopg.Connection,
    rebuild_id: uuid.UUID,
    to: str,
    *,
    expect: str,
    in_attempt: int,
    claimed_by: str,
    **changes: object,
) -> RebuildRow | None:
    """A step's move of the rebuild to phase ``to`` (with the named columns): only
    from the phase the step began in (``expect``), in the same attempt, and while
    ``claimed_by`` still claims it. Once the cutover's swap is recorded
    (``previous_generation``) the rebuild's generation serves, so it can only finish:
    never back to ``requested`` or ``catching_up``, never to ``failed``.

    None if the rebuild is no longer where the step found it (cancelled, failed,
    restarted or finished meanwhile) or the move is one of those refused; raises
    ``RebuildClaimLost`` if another worker claims it now."""
    row = _set(
        conn,
        rebuild_id,
        to,
        changes,
        " AND phase = %(expect)s AND attempt = %(in_attempt)s AND claimed_by = %(claimant)s"
        " AND (previous_generation IS NULL OR %(phase)s IN ('cutting_over', 'done'))",
        {"expect": expect, "in_attempt": in_attempt, "claimant": claimed_by},
    )
    if row is None:
        _check_claim(conn, rebuild_id, claimed_by)
    return row


def _set(
    conn: psycopg.Connection,
    rebuild_id: uuid.UUID,
    phase: str,
    changes: dict[str, object],
    where: str,
    params: dict[str, object],
) -> RebuildRow | None:
    """One UPDATE of the row if ``where`` holds: the phase, the named columns,
    ``finished_at`` when the phase is final. When the phase changes, the seconds
    spent in the one it leaves are added to ``timings`` (a phase entered again on a
    restart adds up)."""
    unknown = set(changes) - _SETTABLE
    if unknown:
        raise ValueError(f"not a rebuild column to set: {sorted(unknown)}")
    assert not set(params) & set(changes), "a condition's parameter named like a column"
    sets = "".join(f", {name} = %({name})s" for name in changes)
    row = conn.execute(
        "UPDATE rebuild SET timings = CASE WHEN phase = %(phase)s THEN timings"
        " ELSE timings || jsonb_build_object(phase::text,"
        " coalesce((timings ->> phase)::float8, 0) + extract(epoch FROM"
        " clock_timestamp() - coalesce(phase_started_at, created_at))::float8) END,"
        " phase_started_at = CASE WHEN phase = %(phase)s"
        " THEN coalesce(phase_started_at, created_at) ELSE clock_timestamp() END,"
        f" phase = %(phase)s, updated_at = clock_timestamp(){sets},"
        " finished_at = CASE WHEN %(phase)s IN ('done', 'failed', 'cancelled')"
        " THEN clock_timestamp() END"
        f" WHERE rebuild_id = %(rebuild_id)s{where} RETURNING {_COLUMNS}",
        {**params, **changes, "phase": phase, "rebuild_id": rebuild_id},
    ).fetchone()
    return None if row is None else _row(row)


def claim(
    conn: psycopg.Connection,
    rebuild_id: uuid.UUID,
    worker: str,
    seconds: float,
    *,
    locked: bool = False,
) -> bool:
    """Take or renew the claim on an unfinished rebuild; False if it is finished, or
    another worker's claim is still in force. ``locked``: ``worker`` holds the
    rebuild's lock (``processors.rebuild.orchestrator``), so no other worker's session
    does: whoever claims it lost its session (it died), and the claim is taken at
    once instead of when it runs out."""
    cur = conn.execute(
        "UPDATE rebuild SET claimed_by = %(worker)s,"
        " claim_expires_at = clock_timestamp() + make_interval(secs => %(seconds)s)"
        " WHERE rebuild_id = %(rebuild_id)s AND phase NOT IN ('done', 'failed', 'cancelled')"
        " AND (claimed_by IS NULL OR claimed_by = %(worker)s"
        " OR claim_expires_at < clock_timestamp() OR %(locked)s)",
        {"worker": worker, "seconds": seconds, "rebuild_id": rebuild_id, "locked": locked},
    )
    return cur.rowcount > 0


def renew(conn: psycopg.Connection, rebuild_id: uuid.UUID, worker: str, seconds: float) -> bool:
    """Extend ``worker``'s claim, never taking it: False if the rebuild is finished
    (cancelled, say); raises ``RebuildClaimLost`` if another worker claims it."""
    cur = conn.execute(
        "UPDATE rebuild SET claim_expires_at = clock_timestamp() + make_interval(secs => %s)"
        " WHERE rebuild_id = %s AND claimed_by = %s"
        " AND phase NOT IN ('done', 'failed', 'cancelled')",
        (seconds, rebuild_id, worker),
    )
    if cur.rowcount > 0:
        return True
    _check_claim(conn, rebuild_id, worker)
    return False


def _check_claim(conn: psycopg.Connection, rebuild_id: uuid.UUID, worker: str) -> None:
    row = conn.execute(
        "SELECT claimed_by FROM rebuild WHERE rebuild_id = %s", (rebuild_id,)
    ).fetchone()
    if row is not None and row[0] != worker:
        raise RebuildClaimLost(f"rebuild {rebuild_id} is claimed by {row[0]}, not {worker}")


def unfinished(conn: psycopg.Connection) -> list[RebuildRow]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM rebuild WHERE phase NOT IN ('done', 'failed', 'cancelled')"
        " ORDER BY created_at"
    ).fetchall()
    return [_row(r) for r in rows]


def next_generation(conn: psycopg.Connection, tenant_id: str, catalog_id: str) -> int:
    """A projection generation no consumer serves and no rebuild of the catalog has
    used: one above every generation named for it so far."""
    row = conn.execute(
        "SELECT greatest("
        " (SELECT max(generation) FROM stream_progress WHERE tenant_id = %s AND catalog_id = %s),"
        " (SELECT max(generation) FROM rebuild WHERE tenant_id = %s AND catalog_id = %s), 1)",
        (tenant_id, catalog_id, tenant_id, catalog_id),
    ).fetchone()
    assert row is not None
    return int(row[0]) + 1


def shadow_generation(conn: psycopg.Connection, shadow_consumer: str) -> int | None:
    """The generation of the rebuild whose shadow ``shadow_consumer`` is, while that
    shadow applies (catching up, cutting over): the only one it may apply into.
    None in any other phase (its generation not loaded yet, or the rebuild over)."""
    row = conn.execute(
        "SELECT generation FROM rebuild WHERE shadow_consumer = %s"
        " AND phase IN ('catching_up', 'cutting_over')",
        (shadow_consumer,),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def start_shadow(
    conn: psycopg.Connection, consumer: str, stream: StreamId, position: int, generation: int
) -> None:
    """The shadow's own progress row, at the export's position W in its generation
    (the only place it is made: the shadow never creates one, see
    ``processors.applier.progress.lock``). A row left by an earlier attempt of the
    same rebuild is reset to this one's."""
    conn.execute(
        "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch, position,"
        " generation) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (consumer, tenant_id,"
        " catalog_id, history_epoch) DO UPDATE SET position = excluded.position,"
        " generation = excluded.generation, updated_at = now()",
        (consumer, *stream, position, generation),
    )


def uncleaned(conn: psycopg.Connection) -> list[RebuildRow]:
    """Finished rebuilds whose shadow rows and lease are not yet cleaned up."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM rebuild WHERE phase IN ('done', 'failed', 'cancelled')"
        " AND cleaned_at IS NULL ORDER BY finished_at"
    ).fetchall()
    return [_row(r) for r in rows]


def mark_cleaned(conn: psycopg.Connection, rebuild_id: uuid.UUID) -> None:
    conn.execute(
        "UPDATE rebuild SET cleaned_at = clock_timestamp() WHERE rebuild_id = %s", (rebuild_id,)
    )


@dataclass(frozen=True, slots=True)
class ControlAnswer:
    command_id: uuid.UUID
    status: str
    message: str
    running_rebuild_id: uuid.UUID | None


def record_answer(
    conn: psycopg.Connection,
    command_id: uuid.UUID,
    status: str,
    message: str,
    running_rebuild_id: uuid.UUID | None,
) -> ControlAnswer:
    """Keep the answer to a request that was not started; the first one stands."""
    conn.execute(
        "INSERT INTO control_answer (command_id, status, message, running_rebuild_id)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (command_id) DO NOTHING",
        (command_id, status, message, running_rebuild_id),
    )
    answer = answer_of(conn, command_id)
    assert answer is not None
    return answer


def answer_of(conn: psycopg.Connection, command_id: uuid.UUID) -> ControlAnswer | None:
    row = conn.execute(
        "SELECT command_id, status, message, running_rebuild_id FROM control_answer"
        " WHERE command_id = %s",
        (command_id,),
    ).fetchone()
    return None if row is None else ControlAnswer(*row)


def is_shadow(conn: psycopg.Connection, consumer: str) -> bool:
    """Whether ``consumer`` is (or was) a rebuild's shadow, whatever its phase."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM rebuild WHERE shadow_consumer = %s)", (consumer,)
    ).fetchone()
    return bool(row and row[0])
