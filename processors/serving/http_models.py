"""Response bodies of the read API (the OpenAPI contract)."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, Field

from db.product import serving as sql


class ServedFrom(BaseModel):
    """The snapshot a response was read from: the stream's history epoch, the
    generation that served it, and the live consumer's durable position then (every
    event at or below it is in the response's rows)."""

    history_epoch: int
    generation: int
    position: int

    @classmethod
    def of(cls, served: sql.Served) -> ServedFrom:
        return cls(
            history_epoch=served.history_epoch,
            generation=served.generation,
            position=served.position,
        )


class ItemSummary(BaseModel):
    item_id: str
    class_id: str
    status: str
    title: str
    parent_item_id: str | None
    revision: int


class Item(ItemSummary):
    attributes: dict[str, str] = Field(description="The item's own attribute map.")
    position: int = Field(description="The stream position of the item's last event.")
    decision_id: uuid.UUID | None = Field(
        description="The decision that made this state; null for an item last changed by"
        " an event written before schema release v3 (until a rebuild)."
    )

    @classmethod
    def of(cls, row: sql.ItemRow) -> Item:
        return cls(
            item_id=row.item_id,
            class_id=row.class_id,
            status=row.status,
            title=row.title,
            parent_item_id=row.parent_item_id,
            revision=row.revision,
            attributes=row.attributes,
            position=row.position,
            decision_id=row.decision_id,
        )


class ItemPage(BaseModel):
    served_from: ServedFrom
    items: list[ItemSummary]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null: last.")


class ListingMapping(BaseModel):
    listing_id: str
    item_revision: int = Field(description="The item revision the listing was mapped to.")
    decision_id: uuid.UUID
    revision: int


class AttributeValue(BaseModel):
    attribute_key: str
    label: str | None = Field(description="The label of the definition version it was set under.")
    definition_version: int
    value_type: str
    value: str = Field(description="Canonical text of `value_type`.")
    item_revision: int
    decision_id: uuid.UUID
    revision: int


class Split(BaseModel):
    split_id: uuid.UUID
    source_item_id: str
    source_revision: int
    successor_item_ids: list[str]
    remaps: dict[str, str] = Field(description="Listing id -> the successor it moved to.")
    decision_id: uuid.UUID


class ItemDetail(BaseModel):
    served_from: ServedFrom
    item: Item
    listing_mappings: list[ListingMapping]
    attribute_values: list[AttributeValue]
    split_into: Split | None = Field(description="The split that replaced this item, if any.")
    split_from: list[Split] = Field(description="The splits this item is a successor of.")


class PolicyVersion(BaseModel):
    policy_id: str
    version: int
    scope: str
    effective_from: datetime
    effective_to: datetime | None = Field(description="Exclusive; null: open-ended.")
    terms: dict[str, str]
    decision_id: uuid.UUID


class PolicyPage(BaseModel):
    served_from: ServedFrom
    versions: list[PolicyVersion]
    next_cursor: str | None


class SearchHit(BaseModel):
    item_id: str
    title: str
    status: str
    rank: float = Field(description="PostgreSQL ts_rank: higher is better; title words weigh more.")


class SearchPage(BaseModel):
    served_from: ServedFrom
    hits: list[SearchHit]
    next_cursor: str | None
