"""Shipping policy versions (INV-03): windows of one policy and scope never overlap."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import psycopg.errors

from db.repositories import shipping_policies as policies
from db.stream_writer import PendingEvent
from db.unit_of_work import UnitOfWork
from producers.resolver.exceptions import InvalidPolicyWindow, OverlappingPolicyWindow
from producers.resolver.facts import DecisionScope
from schemas.events import AggregateRef, ShippingPolicyVersioned

AGGREGATE = "shipping_policy"


@dataclass(frozen=True, slots=True)
class VersionShippingPolicy:
    """Accept a new version of ``policy_id`` in ``scope``, valid over [from, to)."""

    policy_id: str
    scope: str
    effective_from: datetime
    effective_to: datetime | None = None
    terms: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for value in (self.effective_from, self.effective_to):
            if value is not None and value.utcoffset() is None:
                raise InvalidPolicyWindow(
                    f"policy {self.policy_id!r}: times must be timezone-aware"
                )
        if self.effective_to is not None and self.effective_to <= self.effective_from:
            raise InvalidPolicyWindow(
                f"policy {self.policy_id!r}: window [{self.effective_from}, {self.effective_to})"
                " is empty"
            )

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        version_policy(uow, scope.tenant_id, scope.catalog_id, scope.decision_id, self)


def version_policy(
    uow: UnitOfWork,
    tenant_id: str,
    catalog_id: str,
    decision_id: uuid.UUID,
    fact: VersionShippingPolicy,
) -> int:
    """Insert the policy's next version and queue its event; returns the version.

    PostgreSQL's exclusion constraint decides overlaps, also against versions written
    concurrently by other catalogs' writers (which hold other cursor locks): the
    second insert waits for the first transaction and fails if it commits.
    """
    writer = uow.stream(tenant_id, catalog_id)
    try:
        version = policies.insert_next_version(
            uow.tx,
            tenant_id,
            catalog_id,
            fact.policy_id,
            fact.scope,
            fact.effective_from,
            fact.effective_to,
            fact.terms,
            decision_id,
        )
    except psycopg.errors.ExclusionViolation as exc:
        raise OverlappingPolicyWindow(
            f"policy {fact.policy_id!r} scope {fact.scope!r}: [{fact.effective_from},"
            f" {fact.effective_to or 'open'}) overlaps an existing version"
        ) from exc
    writer.append(
        PendingEvent(
            aggregate=AggregateRef(type=AGGREGATE, id=fact.policy_id, revision=version),
            payload=ShippingPolicyVersioned(
                scope=fact.scope,
                effective_from=fact.effective_from,
                effective_to=fact.effective_to,
                terms=dict(fact.terms),
                decision_id=decision_id,
            ),
        )
    )
    return version
