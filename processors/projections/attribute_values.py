"""The attribute-value projection: each item's current value of each attribute.

An ``attribute_value.set`` event depends on the item revision it was accepted
against and on the published revision of its definition version, so the planner
parks it until both are applied; by the time ``fold`` sees it, the item row and the
definition row are there. Each event carries the whole value, so the newest revision
of an (item, key) replaces the row.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from processors.projections.latest import latest_of
from processors.projections.table import Column, TableProjection, composite_id
from schemas.events import AttributeValueSet, Envelope
from schemas.ids import AggregateKey, parse_value_id, value_id

AGGREGATE = "attribute_value"


@dataclass(frozen=True, slots=True)
class ValueState:
    """A whole projection row."""

    tenant_id: str
    catalog_id: str
    item_id: str
    attribute_key: str
    definition_version: int
    value_type: str
    value: str
    item_revision: int
    decision_id: uuid.UUID
    revision: int
    position: int


def fold(events: Iterable[Envelope]) -> dict[AggregateKey, ValueState]:
    """One row per (item, key): the batch's last revision of it."""
    return {
        key: ValueState(
            event.tenant_id,
            event.catalog_id,
            payload.item_id,
            payload.attribute_key,
            payload.definition_version,
            payload.value_type,
            payload.value,
            payload.item_revision,
            payload.decision_id,
            event.aggregate.revision,
            event.position,
        )
        for key, (event, payload) in latest_of(events, AttributeValueSet).items()
    }


PROJECTION = TableProjection(
    aggregate=AGGREGATE,
    table="product_attribute_value",
    id=composite_id((Column("item_id"), Column("attribute_key")), parse_value_id, value_id),
    columns=(
        Column("definition_version"),
        Column("value_type"),
        Column("value"),
        Column("item_revision"),
        Column("decision_id"),
    ),
    row=ValueState,
    fold=fold,
)
