"""Response bodies of the class and attribute read endpoints (the OpenAPI contract).
The decision endpoint's attribute facts are request bodies of
``producers.resolver.http_models``, with every other fact kind."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from db.repositories.attributes import ClassRow, DefinitionRow


class CatalogClass(BaseModel):
    class_id: str
    parent_class_id: str | None = Field(description="null for a root class.")
    decision_id: uuid.UUID

    @classmethod
    def of(cls, row: ClassRow) -> CatalogClass:
        return cls(
            class_id=row.class_id, parent_class_id=row.parent_class_id, decision_id=row.decision_id
        )


class ClassList(BaseModel):
    classes: list[CatalogClass] = Field(description="In class-id order.")


class AttributeDefinition(BaseModel):
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

    @classmethod
    def of(cls, row: DefinitionRow) -> AttributeDefinition:
        return cls(
            attribute_key=row.attribute_key,
            version=row.version,
            label=row.label,
            value_type=row.value_type,  # type: ignore[arg-type]  # the table's CHECK
            allowed_values=list(row.allowed_values),
            applies_to=list(row.applies_to),
            status=row.status,  # type: ignore[arg-type]  # the table's CHECK
            revision=row.revision,
            decision_id=row.decision_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


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


class ItemAttributes(BaseModel):
    item_id: str
    class_id: str
    lineage: list[str] = Field(description="The item's class, then its ancestors.")
    values: list[AttributeValue] = Field(description="By key.")
