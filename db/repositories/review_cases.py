"""SQL for review cases, run inside a Unit of Work's transaction."""

from __future__ import annotations

from dataclasses import dataclass

from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class CaseRow:
    case_id: str
    subject_type: str
    subject_id: str
    status: str
    revision: int


def insert(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    case_id: str,
    subject_type: str,
    subject_id: str,
) -> bool:
    """Open a case at revision 1; False if the case id is taken."""
    row = tx.execute(
        "INSERT INTO review_case (tenant_id, catalog_id, case_id, subject_type, subject_id,"
        " status, revision) VALUES (%s, %s, %s, %s, %s, 'open', 1)"
        " ON CONFLICT DO NOTHING RETURNING 1",
        (tenant_id, catalog_id, case_id, subject_type, subject_id),
    ).fetchone()
    return row is not None


def advance(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    case_id: str,
    expected_revision: int,
    status: str,
) -> int | None:
    """Move the case from ``expected_revision`` to the next; None if it is not there.

    The ``revision = expected`` condition is the optimistic check of INV-04: of two
    decisions made against the same revision, the second's UPDATE waits for the
    first's row lock, then re-checks the condition against the committed row and
    matches nothing. In a unit reading without the cursor lock the UPDATE goes with
    its write, which fails unless it matched the case (``Transaction.defer_expected``).
    """
    query = (
        "UPDATE review_case SET revision = revision + 1, status = %s, updated_at = now()"
        " WHERE tenant_id = %s AND catalog_id = %s AND case_id = %s AND revision = %s"
        " RETURNING revision"
    )
    params = (status, tenant_id, catalog_id, case_id, expected_revision)
    if tx.unlocked:
        tx.defer_expected(query, params, 1, f"case {case_id} at revision {expected_revision}")
        return expected_revision + 1
    row = tx.execute(query, params).fetchone()
    return int(row[0]) if row else None


def get(tx: Transaction, tenant_id: str, catalog_id: str, case_id: str) -> CaseRow | None:
    row = tx.execute(
        "SELECT case_id, subject_type, subject_id, status, revision FROM review_case"
        " WHERE tenant_id = %s AND catalog_id = %s AND case_id = %s",
        (tenant_id, catalog_id, case_id),
    ).fetchone()
    return CaseRow(*row) if row else None


def page(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    status: str | None,
    after: str | None,
    limit: int,
) -> list[CaseRow]:
    """Cases in case-id order after ``after`` (keyset pagination), optionally of one
    status; at most ``limit``."""
    rows = tx.execute(
        "SELECT case_id, subject_type, subject_id, status, revision FROM review_case"
        " WHERE tenant_id = %s AND catalog_id = %s"
        " AND (%s::text IS NULL OR status = %s) AND (%s::text IS NULL OR case_id > %s)"
        " ORDER BY case_id LIMIT %s",
        (tenant_id, catalog_id, status, status, after, after, limit),
    ).fetchall()
    return [CaseRow(*r) for r in rows]
