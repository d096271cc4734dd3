"""The shipping-policy projection: every version of every policy, with its window.

A policy's version is its aggregate revision, and each version is a row of its own:
a newer version does not replace an older one (it may cover another scope or
window). So the "applied revision" the planner compares against is not the newest
stored version but the end of the unbroken run 1..n of stored versions. Were it the
newest, version 1 arriving after version 2 would be judged stale and never stored;
this way it is applied, and a version is stale only once it is surely there.

It is the one projection not described as a ``table.TableProjection`` and keeps its
own SQL: a row per version rather than per aggregate, no ``revision`` column to guard
on (a version is immutable, so a stored one is left as it is, not upserted), and a
probe that answers the run 1..n rather than one row's revision. None of that is the
shared shape, and teaching the shared statements all three would only blur them; so
the ``COPY`` a rebuild's load copies an export chunk of policy versions with
(``COPY``) is its own too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb

from processors.projections.bulk import LoadTarget, copy_chunk, copy_statement
from schemas.events import Envelope, ShippingPolicyVersioned, aggregate_key
from schemas.exports import KINDS
from schemas.ids import AggregateKey

AGGREGATE = "shipping_policy"


@dataclass(frozen=True, slots=True)
class PolicyVersion:
    """A whole projection row; versions never change once written."""

    tenant_id: str
    catalog_id: str
    policy_id: str
    version: int
    scope: str
    effective_from: datetime
    effective_to: datetime | None
    terms: Mapping[str, str]
    decision_id: uuid.UUID
    position: int


def fold(events: Iterable[Envelope]) -> dict[tuple[AggregateKey, int], PolicyVersion]:
    """One row per policy version among the applied events of a batch."""
    rows: dict[tuple[AggregateKey, int], PolicyVersion] = {}
    for event in events:
        payload = event.payload
        if not isinstance(payload, ShippingPolicyVersioned):
            continue
        version = event.aggregate.revision
        rows.setdefault(
            (aggregate_key(event), version),
            PolicyVersion(
                event.tenant_id,
                event.catalog_id,
                event.aggregate.id,
                version,
                payload.scope,
                payload.effective_from,
                payload.effective_to,
                dict(payload.terms),
                payload.decision_id,
                event.position,
            ),
        )
    return rows


# An export chunk of policy versions into a new generation (a rebuild's load): the
# record's fields (``schemas.exports``) into the columns ``write`` inserts, the
# record's ``id`` into ``policy_id``.
COPY = copy_statement(
    "product_shipping_policy_version",
    ("policy_id" if f.name == "id" else f.name for f in KINDS[AGGREGATE]),
)


@dataclass(frozen=True, slots=True)
class PolicyVersions:
    """The projection as the registry lists it: its own probe and insert."""

    aggregate: str = AGGREGATE
    table: str = "product_shipping_policy_version"

    def load_revisions(
        self, conn: psycopg.Connection, generation: int, keys: Iterable[AggregateKey]
    ) -> dict[AggregateKey, int]:
        """For each policy among ``keys``: n, where versions 1..n are stored and n + 1 is
        not. Absent (never applied) when version 1 is missing.

        One lateral probe per key on the primary key: the first stored version, counting
        from 1, whose successor is not stored.
        """
        wanted = sorted({k for k in keys if k[2] == AGGREGATE})
        if not wanted:
            return {}
        rows = conn.execute(
            "SELECT k.t, k.c, k.p, r.version"
            " FROM unnest(%b::text[], %b::text[], %b::text[]) AS k(t, c, p)"
            " CROSS JOIN LATERAL (SELECT v.version FROM product_shipping_policy_version v"
            "  WHERE v.generation = %b AND v.tenant_id = k.t AND v.catalog_id = k.c"
            "  AND v.policy_id = k.p AND NOT EXISTS (SELECT 1"
            "   FROM product_shipping_policy_version w WHERE w.generation = v.generation"
            "   AND w.tenant_id = v.tenant_id AND w.catalog_id = v.catalog_id"
            "   AND w.policy_id = v.policy_id AND w.version = v.version + 1)"
            "  AND EXISTS (SELECT 1 FROM product_shipping_policy_version f"
            "   WHERE f.generation = v.generation AND f.tenant_id = v.tenant_id"
            "   AND f.catalog_id = v.catalog_id AND f.policy_id = v.policy_id AND f.version = 1)"
            "  ORDER BY v.version LIMIT 1) r",
            ([k[0] for k in wanted], [k[1] for k in wanted], [k[3] for k in wanted], generation),
        ).fetchall()
        return {(t, c, AGGREGATE, p): int(v) for t, c, p, v in rows}

    def write(
        self, conn: psycopg.Connection, generation: int, changes: Iterable[PolicyVersion]
    ) -> None:
        """Insert the versions in one statement, as binary arrays. A version already
        stored is left as it is: versions are immutable, so it can only be the same."""
        rows = list(changes)
        if not rows:
            return
        conn.execute(
            "INSERT INTO product_shipping_policy_version (generation, tenant_id, catalog_id,"
            " policy_id, version, scope, effective_from, effective_to, terms, decision_id,"
            " position)"
            " SELECT %b, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::int8[],"
            " %b::text[], %b::timestamptz[], %b::timestamptz[], %b::jsonb[], %b::uuid[],"
            " %b::int8[])"
            " ON CONFLICT (generation, tenant_id, catalog_id, policy_id, version) DO NOTHING",
            (
                generation,
                [r.tenant_id for r in rows],
                [r.catalog_id for r in rows],
                [r.policy_id for r in rows],
                [r.version for r in rows],
                [r.scope for r in rows],
                [r.effective_from for r in rows],
                [r.effective_to for r in rows],
                [Jsonb(dict(r.terms)) for r in rows],
                [r.decision_id for r in rows],
                [r.position for r in rows],
            ),
        )

    def apply(self, conn: psycopg.Connection, generation: int, events: Iterable[Envelope]) -> None:
        """Fold the applied events of a batch and write them: what the applier calls."""
        self.write(conn, generation, fold(events).values())

    def load_chunk(self, conn: psycopg.Connection, target: LoadTarget, chunk: bytes) -> int:
        """Copy an export chunk of policy versions into the (new, empty) generation in
        one statement (``COPY``); the rows inserted."""
        return copy_chunk(conn, COPY, target, chunk)


PROJECTION = PolicyVersions()
