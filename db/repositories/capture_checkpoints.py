"""SQL for capture-job checkpoints: the only module that writes ``capture_checkpoint``.

A checkpoint says how far one job's run over one extraction (one parser version)
got: every product before ``next_item`` has a terminal outcome or a durable retry
record. It only moves by compare-and-set against the value the caller's run
loaded, so a stale run can never move it backwards or past newer progress.
``producers.capture.worker.checkpoints`` is the only caller; a unit test reads the code and
fails when any other module writes these rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    tenant_id: str
    job_id: uuid.UUID
    parser_version: int
    next_item: int
    items: int


_ROW = "tenant_id, job_id, parser_version, next_item, items"
_KEY = "tenant_id = %s AND job_id = %s AND parser_version = %s"


def load_or_start(
    tx: Transaction, tenant_id: str, job_id: uuid.UUID, parser_version: int, items: int
) -> CheckpointRow:
    """The checkpoint of this job and parser version, starting it at 0 if new.

    Concurrent first runs both insert; the second waits for the first's row, then
    does nothing, and both read the same row.
    """
    tx.execute(
        "INSERT INTO capture_checkpoint (tenant_id, job_id, parser_version, next_item, items)"
        " VALUES (%s, %s, %s, 0, %s) ON CONFLICT DO NOTHING",
        (tenant_id, job_id, parser_version, items),
    )
    found = get(tx, tenant_id, job_id, parser_version)
    assert found is not None
    return found


def get(
    tx: Transaction, tenant_id: str, job_id: uuid.UUID, parser_version: int
) -> CheckpointRow | None:
    row = tx.execute(
        f"SELECT {_ROW} FROM capture_checkpoint WHERE {_KEY}", (tenant_id, job_id, parser_version)
    ).fetchone()
    return CheckpointRow(*row) if row else None


def compare_and_set(
    tx: Transaction,
    tenant_id: str,
    job_id: uuid.UUID,
    parser_version: int,
    expected: int,
    to: int,
) -> bool:
    """Move ``next_item`` from ``expected`` to ``to`` (never backwards); False when the
    row no longer holds ``expected``. A concurrent mover's UPDATE waits for this
    row lock, then re-checks against the committed value and matches nothing."""
    if to < expected:
        raise ValueError(f"a checkpoint never moves backwards ({expected} -> {to})")
    row = tx.execute(
        f"UPDATE capture_checkpoint SET next_item = %s, updated_at = clock_timestamp()"
        f" WHERE {_KEY} AND next_item = %s RETURNING 1",
        (to, tenant_id, job_id, parser_version, expected),
    ).fetchone()
    return row is not None


def delete_of_jobs(tx: Transaction, tenant_id: str, job_ids: list[uuid.UUID]) -> int:
    """Delete every checkpoint of these jobs (the evidence sweep removes a capture's
    extraction runs with it, once nothing can run on it again); returns the count."""
    cur = tx.execute(
        "DELETE FROM capture_checkpoint WHERE tenant_id = %s AND job_id = ANY(%s)",
        (tenant_id, job_ids),
    )
    return cur.rowcount
