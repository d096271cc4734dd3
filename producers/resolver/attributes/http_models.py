"""Response bodies of the class and attribute read endpoints (the OpenAPI contract).
The decision endpoint's attribute facts are request bodies of
``producers.resolver.http_models``, with every other fact kind. Bodies follow its
convention: ``model_validate(row)`` where a row has the body's fields."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from db.repositories.attributes import DefinitionRow, ValueRow


class CatalogClass(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    class_id: str
    parent_class_id: str | None = Field(description="null for a root class.")
    decision_id: uuid.UUID


class ClassList(BaseModel):
    classes: list[CatalogClass] = Field(description="In class-id order.")


class AttributeDefinition(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    attribute_key: str
    version: int
    label: str
    value_type: Literal["text", "number", "boolean", "enum"]
    allowed_values: list[str] = Field(description="An enum's values; empty for other types.")
    applies_to: list[str] = Field(description="Each class with all its descendants.")
    status: Literal["draft", "published"]
    revision: int
    decision_id: uuid.UUID = Field(description="The decision of the latest revision.")
    created_at: datetime
    updated_at: datetime


class DefinitionList(BaseModel):
    definitions: list[AttributeDefinition] = Field(description="By key, then version.")


class AttributeValue(BaseModel):
    attribute_key: str
    definition_version: int
    label: str = Field(description="The definition version's label.")
    value_type: Literal["text", "number", "boolean", "enum"]
    value: str = Field(description="Canonical text of the value for its type.")
    revision: int
    item_revision: int = Field(description="The item's revision the value was set against.")
    decision_id: uuid.UUID
    updated_at: datetime

    @classmethod
    def of(cls, value: ValueRow, definition: DefinitionRow) -> AttributeValue:
        """Explicit: the label and type are the value's definition's."""
        return cls(
            attribute_key=value.attribute_key,
            definition_version=value.definition_version,
            label=definition.label,
            value_type=definition.value_type,  # type: ignore[arg-type]  # the table's CHECK
            value=value.value,
            revision=value.revision,
            item_revision=value.item_revision,
            decision_id=value.decision_id,
            updated_at=value.updated_at,
        )


class ItemAttributes(BaseModel):
    item_id: str
    class_id: str
    lineage: list[str] = Field(description="The item's class, then its ancestors.")
    values: list[AttributeValue] = Field(description="By key.")
