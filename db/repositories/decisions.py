"""SQL for decisions: insert-only (the application role cannot update or delete them)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from db.insert_ranks import rank
from db.row_source import Column, rows_from
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
    prior_decision_ids: list[uuid.UUID]


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
    """Insert the decision row and its prior-decision links (sent with the next
    statement: nothing in the transaction reads them back; the rows of several
    decisions of one transaction may go in one statement, ``defer_rows``)."""
    row = (
        decision_id,
        action,
        actor,
        actor_kind,
        rationale,
        json.dumps(list(evidence)),  # a JSON text costs less to send than a Jsonb
        case_id,
        case_revision,
    )
    if not tx.late_errors:  # one row alone: VALUES costs less than unnesting arrays
        # The keys by the names the other parts of a joined write give them, which
        # share one parameter each (``db.joined_write.SHARED``).
        tx.defer(
            "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor,"
            " actor_kind, rationale, evidence, case_id, case_revision)"
            " VALUES (%(t)s, %(c)s, %(d)s, %(actions)s, %(actors)s, %(kinds)s,"
            " %(rationales)s, %(evidence)s::jsonb, %(cases)s, %(case_revisions)s)",
            {"t": tenant_id, "c": catalog_id, "d": decision_id}
            | dict(zip(_DECISION_COLUMNS[1:], row[1:], strict=True)),
        )
    else:  # joinable with other decisions' rows: a list a column
        params: dict[str, Any] = {"t": tenant_id, "c": catalog_id}
        params |= {column: [value] for column, value in zip(_DECISION_COLUMNS, row, strict=True)}
        params["evidence"] = [Jsonb(list(evidence))]
        tx.defer_rows(_JOINED_DECISIONS, params, _DECISION_COLUMNS, rank("decision"))
    if prior_decision_ids:
        tx.defer(
            "INSERT INTO decision_prior (tenant_id, catalog_id, decision_id, prior_decision_id)"
            " SELECT %s, %s, %s, unnest(%b::uuid[])",
            (tenant_id, catalog_id, decision_id, list(prior_decision_ids)),
        )


_DECISION_COLUMNS = (
    "ids",
    "actions",
    "actors",
    "kinds",
    "rationales",
    "evidence",
    "cases",
    "case_revisions",
)
_JOINED_DECISIONS = (
    "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor, actor_kind,"
    " rationale, evidence, case_id, case_revision)"
    " SELECT %(t)s, %(c)s, d.id, d.action, d.actor, d.kind, d.rationale, d.evidence,"
    " d.case_id, d.case_revision FROM unnest(%(ids)b::uuid[], %(actions)b::text[],"
    " %(actors)b::text[], %(kinds)b::text[], %(rationales)b::text[],"
    " %(evidence)b::jsonb[], %(cases)b::text[], %(case_revisions)b::int[])"
    " AS d(id, action, actor, kind, rationale, evidence, case_id, case_revision)"
)
"""The decision rows of several decisions, one list a column (``insert``)."""


@dataclass(frozen=True, slots=True)
class Effect:
    """One aggregate revision a decision changed or relied on (``decision_effect``)."""

    role: str
    aggregate_type: str
    aggregate_id: str
    revision: int


_EFFECT_COLUMNS = (
    Column("types", "type", "text"),
    Column("ids", "id", "text"),
    Column("revisions", "revision", "int4"),
    Column("roles", "role", "text"),
)


def insert_effects(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    decision_id: uuid.UUID,
    effects: Sequence[Effect],
) -> None:
    """Insert the decision's effect rows in one statement (binary arrays).

    A second decision claiming to have changed a revision another decision changed
    violates ``decision_effect_changed_once``.
    """
    if not effects:
        return
    params: dict[str, Any] = {
        "t": tenant_id,
        "c": catalog_id,
        "types": [e.aggregate_type for e in effects],
        "ids": [e.aggregate_id for e in effects],
        "revisions": [e.revision for e in effects],
        "roles": [e.role for e in effects],
    }
    rows = (
        " FROM unnest(%(types)b::text[], %(ids)b::text[], %(revisions)b::int4[], %(roles)b::text[]"
    )
    insert = (
        "INSERT INTO decision_effect (tenant_id, catalog_id, aggregate_type, aggregate_id,"
        " revision, role, decision_id) SELECT %(t)s, %(c)s, e.type, e.id, e.revision, e.role,"
    )
    if not tx.late_errors:  # one decision's: its id once
        source, one = rows_from(_EFFECT_COLUMNS, params | {"d": decision_id}, "e")
        tx.defer(f"{insert} %(d)s FROM {source}", one)
        return
    params["decisions"] = [decision_id] * len(effects)  # joinable with other decisions'
    tx.defer_rows(
        insert + " e.decision_id" + rows + ", %(decisions)b::uuid[])"
        " AS e(type, id, revision, role, decision_id)",
        params,
        ("types", "ids", "revisions", "roles", "decisions"),
        rank("decision_effect"),
    )


def missing(
    tx: Transaction, tenant_id: str, catalog_id: str, decision_ids: Sequence[uuid.UUID]
) -> list[uuid.UUID]:
    """Which of ``decision_ids`` this tenant and catalog have no decision for."""
    if not decision_ids:
        return []
    rows = tx.execute(
        "SELECT d.id FROM unnest(%b::uuid[]) AS d(id) WHERE NOT EXISTS (SELECT 1 FROM decision"
        " WHERE tenant_id = %s AND catalog_id = %s AND decision_id = d.id)",
        (list(decision_ids), tenant_id, catalog_id),
    ).fetchall()
    return [r[0] for r in rows]


_COLUMNS = (
    "d.decision_id, d.action, d.actor, d.actor_kind, d.rationale, d.evidence, d.case_id,"
    " d.case_revision, d.decided_at, ARRAY(SELECT p.prior_decision_id FROM decision_prior p"
    " WHERE p.tenant_id = d.tenant_id AND p.catalog_id = d.catalog_id"
    " AND p.decision_id = d.decision_id ORDER BY p.prior_decision_id)"
)


def _row(values: Any) -> DecisionRow:
    return DecisionRow(*values)


def for_case(tx: Transaction, tenant_id: str, catalog_id: str, case_id: str) -> list[DecisionRow]:
    """A case's decisions, oldest first."""
    rows = tx.execute(
        f"SELECT {_COLUMNS} FROM decision d"
        " WHERE d.tenant_id = %s AND d.catalog_id = %s AND d.case_id = %s"
        " ORDER BY d.case_revision",
        (tenant_id, catalog_id, case_id),
    ).fetchall()
    return [_row(r) for r in rows]


def for_item(tx: Transaction, tenant_id: str, catalog_id: str, item_id: str) -> list[DecisionRow]:
    """The decisions in an item's history, oldest first.

    Read from the decisions' effects, which keep every revision where the facts keep
    only the current one: each decision that changed the item (created, updated,
    retired or split it, or created it as a successor) or accepted a fact resting on
    one of its revisions (a listing mapped onto it, even if since moved elsewhere; a
    variant under it); the decision behind its current revision (for an item older
    than the effect rows, the import decision of migration resolver_0005dx); and the
    decisions on review cases about the item (subject type ``catalog_item``), which
    may have changed nothing.
    """
    scope = (tenant_id, catalog_id)
    rows = tx.execute(
        f"SELECT {_COLUMNS} FROM decision d WHERE d.tenant_id = %s AND d.catalog_id = %s"
        " AND d.decision_id IN ("
        " SELECT decision_id FROM decision_effect"
        "  WHERE tenant_id = %s AND catalog_id = %s"
        "  AND aggregate_type = 'catalog_item' AND aggregate_id = %s"
        " UNION SELECT decision_id FROM catalog_item"
        "  WHERE tenant_id = %s AND catalog_id = %s AND item_id = %s"
        " UNION SELECT c.decision_id FROM decision c JOIN review_case r"
        "  USING (tenant_id, catalog_id, case_id)"
        "  WHERE r.tenant_id = %s AND r.catalog_id = %s"
        "  AND r.subject_type = 'catalog_item' AND r.subject_id = %s)"
        " ORDER BY d.decided_at, d.decision_id",
        (*scope, *scope, item_id, *scope, item_id, *scope, item_id),
    ).fetchall()
    return [_row(r) for r in rows]
