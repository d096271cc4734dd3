"""The attribute-definition projection: every version of every attribute, with its
type, enum values, applicability and status.

Each version is an aggregate of its own (``"<key>/<version>"``) whose events carry
its whole state: defined (draft or published), then published. A row moves only to
a higher revision, so a late draft event never unpublishes a version.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from processors.projections.latest import latest_of
from processors.projections.table import Column, TableProjection, composite_id, jsonb_list
from schemas.events import AttributeDefined, Envelope
from schemas.ids import AggregateKey, definition_id, parse_definition_id

AGGREGATE = "attribute_definition"


@dataclass(frozen=True, slots=True)
class DefinitionState:
    """A whole projection row."""

    tenant_id: str
    catalog_id: str
    attribute_key: str
    version: int
    label: str
    value_type: str
    allowed_values: tuple[str, ...]
    applies_to: tuple[str, ...]
    status: str
    decision_id: uuid.UUID
    revision: int
    position: int


def fold(events: Iterable[Envelope]) -> dict[AggregateKey, DefinitionState]:
    """One row per definition version: the batch's last revision of it."""
    return {
        key: DefinitionState(
            event.tenant_id,
            event.catalog_id,
            payload.attribute_key,
            payload.version,
            payload.label,
            payload.value_type,
            payload.allowed_values,
            payload.applies_to,
            payload.status,
            payload.decision_id,
            event.aggregate.revision,
            event.position,
        )
        for key, (event, payload) in latest_of(events, AttributeDefined).items()
    }


PROJECTION = TableProjection(
    aggregate=AGGREGATE,
    table="product_attribute_definition",
    id=composite_id(
        (Column("attribute_key"), Column("version")),
        parse_definition_id,
        definition_id,
    ),
    columns=(
        Column("label"),
        Column("value_type"),
        Column("allowed_values", encode=jsonb_list),
        Column("applies_to", encode=jsonb_list),
        Column("status"),
        Column("decision_id"),
    ),
    row=DefinitionState,
    fold=fold,
)
