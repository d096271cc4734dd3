"""Envelope builders shared by the pure applier and projection tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from schemas.events import AggregateRef, Envelope, Payload

DECISION = uuid.uuid4()
T0 = datetime(2027, 1, 1, tzinfo=UTC)


def event(
    position: int, aggregate: AggregateRef, payload: Payload, *deps: AggregateRef
) -> Envelope:
    """An event of stream t1/c1@1 at ``position``."""
    return Envelope(
        tenant_id="t1",
        catalog_id="c1",
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=aggregate,
        dependencies=deps,
        occurred_at=T0,
        payload=payload,
    )


def ref(type_: str, id_: str, revision: int) -> AggregateRef:
    return AggregateRef(type=type_, id=id_, revision=revision)
