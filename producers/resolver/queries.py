"""Reads of the review work and decision history, for the operator API.

Each read runs in one REPEATABLE READ, READ ONLY transaction, so a case and its
decisions (or an item and its history) come from the same snapshot, and no read takes
a lock a writer would wait for.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.repositories import catalog_items as items
from db.repositories import decisions as decision_rows
from db.repositories import review_cases as cases
from db.repositories.decisions import DecisionRow
from db.repositories.review_cases import CaseRow
from producers.resolver.exceptions import CaseNotFound, ItemNotFound
from producers.resolver.snapshot import snapshot


@dataclass(frozen=True, slots=True)
class CaseWithDecisions:
    case: CaseRow
    decisions: list[DecisionRow]


def list_cases(
    conn: psycopg.Connection,
    tenant_id: str,
    catalog_id: str,
    status: str | None,
    after: str | None,
    limit: int,
) -> list[CaseRow]:
    with snapshot(conn) as tx:
        return cases.page(tx, tenant_id, catalog_id, status, after, limit)


def read_case(
    conn: psycopg.Connection, tenant_id: str, catalog_id: str, case_id: str
) -> CaseWithDecisions:
    with snapshot(conn) as tx:
        case = cases.get(tx, tenant_id, catalog_id, case_id)
        if case is None:
            raise CaseNotFound(f"no case {case_id!r} in {tenant_id}/{catalog_id}")
        return CaseWithDecisions(case, decision_rows.for_case(tx, tenant_id, catalog_id, case_id))


def item_history(
    conn: psycopg.Connection, tenant_id: str, catalog_id: str, item_id: str
) -> list[DecisionRow]:
    with snapshot(conn) as tx:
        if items.get(tx, tenant_id, catalog_id, item_id) is None:
            raise ItemNotFound(f"no item {item_id!r} in {tenant_id}/{catalog_id}")
        return decision_rows.for_item(tx, tenant_id, catalog_id, item_id)
