"""SQL for decisions: insert-only (the application role cannot update or delete them)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class DecisionRow:
    decision_id: uuid.UUID
    action: str
    actor: str
    actor_kind: str
    rationale: str
    evidence: list[dict[str, str]]
    case_id: str | None
    case_revision: int | None
    decided_at: datetime


def insert(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    decision_id: uuid.UUID,
    *,
    action: str,
    actor: str,
    actor_kind: str,
    rationale: str,
    evidence: Sequence[dict[str, str]],
    case_id: str | None,
    case_revision: int | None,
    prior_decision_ids: Sequence[uuid.UUID],
) -> None:
    """Insert the decision row and its prior-decision links."""
    tx.execute(
        "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor, actor_kind,"
        " rationale, evidence, case_id, case_revision)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            tenant_id,
            catalog_id,
            decision_id,
            action,
            actor,
            actor_kind,
            rationale,
            Jsonb(list(evidence)),
            case_id,
            case_revision,
        ),
    )
    if prior_decision_ids:
        tx.executemany(
            "INSERT INTO decision_prior (tenant_id, catalog_id, decision_id, prior_decision_id)"
            " VALUES (%s, %s, %s, %s)",
            [(tenant_id, catalog_id, decision_id, prior) for prior in prior_decision_ids],
        )


def missing(
    tx: Transaction, tenant_id: str, catalog_id: str, decision_ids: Sequence[uuid.UUID]
) -> list[uuid.UUID]:
    """Which of ``decision_ids`` this tenant and catalog have no decision for."""
    if not decision_ids:
        return []
    rows = tx.execute(
        "SELECT d.id FROM unnest(%s::uuid[]) AS d(id) WHERE NOT EXISTS (SELECT 1 FROM decision"
        " WHERE tenant_id = %s AND catalog_id = %s AND decision_id = d.id)",
        (list(decision_ids), tenant_id, catalog_id),
    ).fetchall()
    return [r[0] for r in rows]


def _row(values: Any) -> DecisionRow:
    return DecisionRow(*values)


def for_case(tx: Transaction, tenant_id: str, catalog_id: str, case_id: str) -> list[DecisionRow]:
    """A case's decisions, oldest first."""
    rows = tx.execute(
        "SELECT decision_id, action, actor, actor_kind, rationale, evidence, case_id,"
        " case_revision, decided_at FROM decision"
        " WHERE tenant_id = %s AND catalog_id = %s AND case_id = %s ORDER BY case_revision",
        (tenant_id, catalog_id, case_id),
    ).fetchall()
    return [_row(r) for r in rows]
