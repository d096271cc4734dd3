"""SQL for capture results (one per source item, capture and parser version), their
claims, the newest result per source item, and the operators' list of failures.

Every function runs in the caller's transaction: a result's outcome is written in
the same transaction as the decision it led to, so a crash leaves both or neither.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from psycopg.types.json import Jsonb

from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class ResultKey:
    """A result's identity: what one parser version made of one source item of one
    capture (the capture fixes the content fingerprint and the schema version)."""

    tenant_id: str
    capture_id: uuid.UUID
    source_item_id: str
    parser_version: int


@dataclass(frozen=True, slots=True)
class NewResult:
    key: ResultKey
    job_id: uuid.UUID
    source: str
    catalog_id: str
    adapter: str
    item_index: int | None
    schema_version: int
    fingerprint: str
    locator: str


@dataclass(frozen=True, slots=True)
class ResultRow:
    id: int
    tenant_id: str
    capture_id: uuid.UUID
    source_item_id: str
    parser_version: int
    job_id: uuid.UUID
    source: str
    catalog_id: str
    item_index: int | None
    fingerprint: str
    locator: str
    outcome: str
    attempts: int
    next_attempt_at: datetime | None
    error_code: str | None
    last_error: str | None
    item_id: str | None
    decision_id: uuid.UUID | None
    case_id: str | None
    resolved_by: str | None
    resolution_reason: str | None
    updated_at: datetime


_ROW = (
    "id, tenant_id, capture_id, source_item_id, parser_version, job_id, source, catalog_id,"
    " item_index, fingerprint, locator, outcome, attempts, next_attempt_at, error_code,"
    " last_error, item_id, decision_id, case_id, resolved_by, resolution_reason, updated_at"
)
_KEY = "tenant_id = %s AND capture_id = %s AND source_item_id = %s AND parser_version = %s"
IN_PROGRESS = "IN_PROGRESS"


def _key(key: ResultKey) -> tuple[str, uuid.UUID, str, int]:
    return (key.tenant_id, key.capture_id, key.source_item_id, key.parser_version)


def _insert_values(r: NewResult) -> tuple[object, ...]:
    return (
        *_key(r.key),
        r.job_id,
        r.source,
        r.catalog_id,
        r.adapter,
        r.item_index,
        r.schema_version,
        r.fingerprint,
        r.locator,
    )


_INSERT = (
    "INSERT INTO capture_item (tenant_id, capture_id, source_item_id, parser_version, job_id,"
    " source, catalog_id, adapter, item_index, schema_version, fingerprint, locator,"
    " outcome, next_attempt_at, error_code, last_error)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
    " CASE WHEN %s THEN clock_timestamp() END, %s, %s)"
    " ON CONFLICT DO NOTHING RETURNING 1"
)


@dataclass(frozen=True, slots=True)
class Locked:
    row: ResultRow
    created: bool  # this transaction inserted the row: nobody worked on it before
    due: bool  # a ``retryable`` row whose retry time has come

    @property
    def workable(self) -> bool:
        """Whether to work on the result now: new, or a retry that is due."""
        return self.created or (self.row.outcome == "retryable" and self.due)


def lock(tx: Transaction, new: NewResult) -> Locked:
    """Lock the result's row until the transaction ends, creating it if new.

    The row lock serializes everyone working on this result (a redelivered job, a
    second worker after a claim ran out, an operator's retry): the later one waits
    here, then finds the earlier one's outcome. A new row starts as ``retryable``
    with code ``IN_PROGRESS``, due now, and is settled before this transaction
    commits; should it ever commit unsettled, it is retried like any failure. Take
    this lock before the stream's cursor lock, never after.
    """
    created = tx.execute(
        _INSERT, (*_insert_values(new), "retryable", True, IN_PROGRESS, None)
    ).fetchone()
    row = tx.execute(
        f"SELECT {_ROW}, coalesce(next_attempt_at <= clock_timestamp(), false)"
        f" FROM capture_item WHERE {_KEY} FOR UPDATE",
        _key(new.key),
    ).fetchone()
    assert row is not None
    return Locked(ResultRow(*row[:-1]), created is not None, bool(row[-1]))


def lock_many(tx: Transaction, news: Sequence[NewResult]) -> list[Locked]:
    """``lock`` for several results of one run (one tenant, capture, parser version,
    job and binding; no source item twice), in two statements whatever their number;
    returns them in the order given. Rows are created, then locked, in source item id
    order, so two transactions locking overlapping sets wait rather than deadlock."""
    if not news:
        return []
    first = news[0]
    ordered = sorted(news, key=lambda n: n.key.source_item_id)
    ids = [n.key.source_item_id for n in ordered]
    head = _key(first.key)
    created = {
        r[0]
        for r in tx.execute(
            "INSERT INTO capture_item (tenant_id, capture_id, source_item_id, parser_version,"
            " job_id, source, catalog_id, adapter, item_index, schema_version, fingerprint,"
            " locator, outcome, next_attempt_at, error_code)"
            " SELECT %s, %s, r.source_item_id, %s, %s, %s, %s, %s, r.item_index, %s,"
            " r.fingerprint, r.locator, 'retryable', clock_timestamp(), %s"
            " FROM unnest(%b::text[], %b::int[], %b::text[], %b::text[])"
            " WITH ORDINALITY AS r(source_item_id, item_index, fingerprint, locator, ord)"
            " ORDER BY r.ord ON CONFLICT DO NOTHING RETURNING source_item_id",
            (
                head[0],
                head[1],
                head[3],
                first.job_id,
                first.source,
                first.catalog_id,
                first.adapter,
                first.schema_version,
                IN_PROGRESS,
                ids,
                [n.item_index for n in ordered],
                [n.fingerprint for n in ordered],
                [n.locator for n in ordered],
            ),
        ).fetchall()
    }
    # One primary-key lookup per id, in the array's (key) order. ``source_item_id =
    # ANY(...) ORDER BY`` lets the planner filter the capture's whole key range in
    # order instead, which it prefers while a new capture has no statistics: the
    # capture's size per batch.
    columns = ", ".join(f"r.{c.strip()}" for c in _ROW.split(","))
    rows = tx.execute(
        f"SELECT {columns}, coalesce(r.next_attempt_at <= clock_timestamp(), false)"
        " FROM unnest(%b::text[]) WITH ORDINALITY AS k(source_item_id, ord)"
        f" CROSS JOIN LATERAL (SELECT {_ROW} FROM capture_item c"
        " WHERE c.tenant_id = %s AND c.capture_id = %s AND c.source_item_id = k.source_item_id"
        " AND c.parser_version = %s LIMIT 1 FOR UPDATE) r ORDER BY k.ord",
        (ids, head[0], head[1], head[3]),
    ).fetchall()
    locked = {
        row[3]: Locked(ResultRow(*row[:-1]), row[3] in created, bool(row[-1])) for row in rows
    }
    return [locked[n.key.source_item_id] for n in news]


def insert_rejected(tx: Transaction, new: NewResult, code: str, reason: str) -> bool:
    """Record a product the adapter refused as ``rejected`` (terminal); False when
    the result is already recorded."""
    row = tx.execute(_INSERT, (*_insert_values(new), "rejected", False, code, reason)).fetchone()
    return row is not None


def settle(
    tx: Transaction,
    key: ResultKey,
    outcome: str,
    *,
    item_id: str | None = None,
    decision_id: uuid.UUID | None = None,
    case_id: str | None = None,
    error_code: str | None = None,
    error: str | None = None,
    claims: Claims = (),
) -> None:
    """Give the result a terminal outcome (not ``retryable`` or ``failed``), with the
    claims it makes (a refusal makes none).

    Deferred: it travels with the transaction's next statement (its error, should
    it fail, is raised by that one and the transaction rolls back)."""
    tx.defer(
        "UPDATE capture_item SET outcome = %s, next_attempt_at = NULL, error_code = %s,"
        " last_error = %s, item_id = %s, decision_id = %s, case_id = %s, claims = %s,"
        f" updated_at = clock_timestamp() WHERE {_KEY}",
        (
            outcome,
            error_code,
            error,
            item_id,
            decision_id,
            case_id,
            claims_column(claims),
            *_key(key),
        ),
    )


def record_failure(
    tx: Transaction,
    key: ResultKey,
    error_code: str,
    error: str,
    retry_in_seconds: float | None,
) -> int:
    """Count a failed attempt: ``retryable`` again after ``retry_in_seconds``, or
    ``failed`` when that is None (the budget ran out). Returns the attempts so far."""
    row = tx.execute(
        "UPDATE capture_item SET attempts = attempts + 1,"
        " outcome = CASE WHEN %s::float8 IS NULL THEN 'failed' ELSE 'retryable' END,"
        " next_attempt_at = clock_timestamp() + make_interval(secs => %s::float8),"
        " error_code = %s, last_error = %s, updated_at = clock_timestamp()"
        f" WHERE {_KEY} RETURNING attempts",
        (retry_in_seconds, retry_in_seconds, error_code, error, *_key(key)),
    ).fetchone()
    assert row is not None
    return int(row[0])


Claims = Sequence[tuple[str, str, str]]
"""A result's claims: (field, value, locator) for each field it states."""


def claims_column(claims: Claims) -> Jsonb | None:
    """``capture_item.claims`` of ``claims``: {field: [value, locator]} (None: none)."""
    if not claims:
        return None
    return Jsonb({field: [value, locator] for field, value, locator in claims})


@dataclass(frozen=True, slots=True)
class SourceItemVersion:
    """The version of one result of a source item; newer results win."""

    tenant_id: str
    source: str
    source_item_id: str
    catalog_id: str
    captured_at: datetime
    capture_created_at: datetime
    capture_id: uuid.UUID
    parser_version: int
    schema_version: int
    fingerprint: str
    item_id: str


NEWER_VERSION_WINS = (
    " ON CONFLICT (tenant_id, source, source_item_id) DO UPDATE SET"
    " catalog_id = excluded.catalog_id, captured_at = excluded.captured_at,"
    " capture_created_at = excluded.capture_created_at, capture_id = excluded.capture_id,"
    " parser_version = excluded.parser_version, schema_version = excluded.schema_version,"
    " fingerprint = excluded.fingerprint, item_id = excluded.item_id,"
    " updated_at = clock_timestamp()"
    " WHERE (excluded.captured_at, excluded.capture_created_at, excluded.capture_id,"
    " excluded.parser_version)"
    " >= (s.captured_at, s.capture_created_at, s.capture_id, s.parser_version)"
    " RETURNING 1"
)
"""The tail of an upsert into ``source_item_state AS s``: a version replaces the row
only when it is not older (captured_at, capture arrival, capture, parser version)."""


def advance_source_item(tx: Transaction, v: SourceItemVersion) -> bool:
    """Make ``v`` the source item's newest applied result unless a newer one is
    already there: compare-and-set on (captured_at, capture arrival, capture id,
    parser version). False: newer work won, and nothing changed. The upsert locks
    the row, so two results of one source item are compared one after the other."""
    row = tx.execute(
        "INSERT INTO source_item_state AS s (tenant_id, source, source_item_id, catalog_id,"
        " captured_at, capture_created_at, capture_id, parser_version, schema_version,"
        " fingerprint, item_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        + NEWER_VERSION_WINS,
        (
            v.tenant_id,
            v.source,
            v.source_item_id,
            v.catalog_id,
            v.captured_at,
            v.capture_created_at,
            v.capture_id,
            v.parser_version,
            v.schema_version,
            v.fingerprint,
            v.item_id,
        ),
    ).fetchone()
    return row is not None


def source_item(
    tx: Transaction, tenant_id: str, source: str, source_item_id: str
) -> SourceItemVersion | None:
    row = tx.execute(
        "SELECT tenant_id, source, source_item_id, catalog_id, captured_at, capture_created_at,"
        " capture_id, parser_version, schema_version, fingerprint, item_id"
        " FROM source_item_state WHERE tenant_id = %s AND source = %s AND source_item_id = %s",
        (tenant_id, source, source_item_id),
    ).fetchone()
    return SourceItemVersion(*row) if row else None


def source_items(
    tx: Transaction, tenant_id: str, source: str, source_item_ids: Sequence[str]
) -> dict[str, SourceItemVersion]:
    """``source_item`` for several source items in one statement: those with a
    result applied, by source item id."""
    if not source_item_ids:
        return {}
    # One primary-key lookup per id (``LIMIT 1``), whatever the table's statistics.
    rows = tx.execute(
        "SELECT s.* FROM unnest(%b::text[]) AS k(source_item_id) CROSS JOIN LATERAL"
        " (SELECT tenant_id, source, source_item_id, catalog_id, captured_at,"
        " capture_created_at, capture_id, parser_version, schema_version, fingerprint,"
        " item_id FROM source_item_state WHERE tenant_id = %s AND source = %s"
        " AND source_item_id = k.source_item_id LIMIT 1) s",
        (list(source_item_ids), tenant_id, source),
    ).fetchall()
    return {r[2]: SourceItemVersion(*r) for r in rows}


def by_id(tx: Transaction, result_id: int, lock: bool = False) -> ResultRow | None:
    row = tx.execute(
        f"SELECT {_ROW} FROM capture_item WHERE id = %s" + (" FOR UPDATE" if lock else ""),
        (result_id,),
    ).fetchone()
    return ResultRow(*row) if row else None


def of_job(
    tx: Transaction, job_id: uuid.UUID, parser_version: int | None = None
) -> list[ResultRow]:
    """A job's results in extraction order (refused products last)."""
    rows = tx.execute(
        f"SELECT {_ROW} FROM capture_item WHERE job_id = %s"
        " AND (%s::int IS NULL OR parser_version = %s)"
        " ORDER BY item_index NULLS LAST, source_item_id",
        (job_id, parser_version, parser_version),
    ).fetchall()
    return [ResultRow(*r) for r in rows]


def due_retries(
    tx: Transaction, job_id: uuid.UUID, parser_version: int, before_index: int
) -> list[ResultRow]:
    """The job's ``retryable`` results before ``before_index`` whose retry is due."""
    rows = tx.execute(
        f"SELECT {_ROW} FROM capture_item WHERE job_id = %s AND parser_version = %s"
        " AND outcome = 'retryable' AND next_attempt_at <= clock_timestamp()"
        " AND item_index < %s ORDER BY item_index",
        (job_id, parser_version, before_index),
    ).fetchall()
    return [ResultRow(*r) for r in rows]


@dataclass(frozen=True, slots=True)
class JobOutcomes:
    """How a job's results stand: counts per outcome and the earliest retry."""

    counts: dict[str, int]
    next_retry_at: datetime | None

    def of(self, *outcomes: str) -> int:
        return sum(self.counts.get(o, 0) for o in outcomes)


def outcomes(tx: Transaction, job_id: uuid.UUID, parser_version: int) -> JobOutcomes:
    rows = tx.execute(
        "SELECT outcome, count(*), min(next_attempt_at) FILTER (WHERE outcome = 'retryable')"
        " FROM capture_item WHERE job_id = %s AND parser_version = %s GROUP BY outcome",
        (job_id, parser_version),
    ).fetchall()
    retry_times = [r[2] for r in rows if r[2] is not None]
    return JobOutcomes({str(r[0]): int(r[1]) for r in rows}, min(retry_times, default=None))


def open_failures(
    tx: Transaction, tenant_id: str | None, after_id: int, limit: int
) -> list[ResultRow]:
    """Results waiting on a retry or an operator (``retryable``, ``failed``), in id
    order after ``after_id`` (a bounded page)."""
    rows = tx.execute(
        f"SELECT {_ROW} FROM capture_item WHERE outcome IN ('retryable', 'failed')"
        " AND (%s::text IS NULL OR tenant_id = %s) AND id > %s ORDER BY id LIMIT %s",
        (tenant_id, tenant_id, after_id, limit),
    ).fetchall()
    return [ResultRow(*r) for r in rows]


def requeue(tx: Transaction, result_id: int) -> bool:
    """An operator's retry of a ``failed`` result: due now, with a fresh budget."""
    row = tx.execute(
        "UPDATE capture_item SET outcome = 'retryable', attempts = 0,"
        " next_attempt_at = clock_timestamp(), updated_at = clock_timestamp()"
        " WHERE id = %s AND outcome = 'failed' RETURNING 1",
        (result_id,),
    ).fetchone()
    return row is not None


def requeue_job(tx: Transaction, job_id: uuid.UUID) -> int:
    """Every ``failed`` result of a job, as ``requeue``; returns how many."""
    return tx.execute(
        "UPDATE capture_item SET outcome = 'retryable', attempts = 0,"
        " next_attempt_at = clock_timestamp(), updated_at = clock_timestamp()"
        " WHERE job_id = %s AND outcome = 'failed'",
        (job_id,),
    ).rowcount


def skip(tx: Transaction, result_id: int, actor: str, reason: str) -> bool:
    """An operator gives a ``failed`` or ``retryable`` result up: ``skipped``, with who
    and why (its last error stays for the record)."""
    row = tx.execute(
        "UPDATE capture_item SET outcome = 'skipped', next_attempt_at = NULL,"
        " resolved_by = %s, resolution_reason = %s, updated_at = clock_timestamp()"
        " WHERE id = %s AND outcome IN ('failed', 'retryable') RETURNING 1",
        (actor, reason, result_id),
    ).fetchone()
    return row is not None


def skip_open_of_job(tx: Transaction, job_id: uuid.UUID, actor: str, reason: str) -> int:
    """``skip`` every ``failed`` or ``retryable`` result of a job; returns how many."""
    return tx.execute(
        "UPDATE capture_item SET outcome = 'skipped', next_attempt_at = NULL,"
        " resolved_by = %s, resolution_reason = %s, updated_at = clock_timestamp()"
        " WHERE job_id = %s AND outcome IN ('failed', 'retryable')",
        (actor, reason, job_id),
    ).rowcount
