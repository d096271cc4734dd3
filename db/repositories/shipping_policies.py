"""SQL for shipping policy versions, run inside a Unit of Work's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime

from psycopg.types.json import Jsonb

from db.unit_of_work import Transaction


def insert_next_version(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    policy_id: str,
    scope: str,
    effective_from: datetime,
    effective_to: datetime | None,
    terms: Mapping[str, str],
    decision_id: uuid.UUID,
) -> int:
    """Insert the policy's next version; returns its number.

    The caller holds the stream's cursor lock, which serializes every writer of this
    catalog, so ``max(version) + 1`` cannot be taken twice (the primary key would
    refuse it anyway). Raises ``psycopg.errors.ExclusionViolation`` if the window
    overlaps another version of the same tenant, policy and scope (INV-03).
    """
    # Serializes writers of one (tenant, policy, scope) across catalogs, whose cursor
    # locks differ. Without it two overlapping inserts can each find the other's
    # uncommitted row while checking the exclusion constraint and wait on each other:
    # PostgreSQL then aborts one with a deadlock instead of the overlap error. With
    # it the second waits for the first to end and gets ExclusionViolation (or
    # inserts, if the first rolled back). Held to the end of the transaction; a hash
    # collision only serializes two unrelated policies a little.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
        (f"shipping_policy_version\x1f{tenant_id}\x1f{policy_id}\x1f{scope}",),
    )
    row = tx.execute(
        "INSERT INTO shipping_policy_version (tenant_id, catalog_id, policy_id, version,"
        " scope, effective_from, effective_to, terms, decision_id)"
        " SELECT %(t)s, %(c)s, %(p)s, coalesce(max(version), 0) + 1, %(scope)s, %(from)s,"
        " %(to)s, %(terms)s, %(d)s FROM shipping_policy_version"
        " WHERE tenant_id = %(t)s AND catalog_id = %(c)s AND policy_id = %(p)s"
        " RETURNING version",
        {
            "t": tenant_id,
            "c": catalog_id,
            "p": policy_id,
            "scope": scope,
            "from": effective_from,
            "to": effective_to,
            "terms": Jsonb(dict(terms)),
            "d": decision_id,
        },
    ).fetchone()
    assert row is not None
    return int(row[0])
