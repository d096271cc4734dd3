"""The resolver's read endpoints for classes and attributes (INV-07).

Writes go through the decision endpoint like every accepted change (facts
``define_class``, ``define_attribute``, ``publish_attribute``,
``set_attribute_value``); these routes only read, each in one snapshot.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from producers.http.deps import Conn
from producers.resolver.attributes import queries
from producers.resolver.attributes.http_models import (
    AttributeDefinition,
    AttributeValue,
    CatalogClass,
    ClassList,
    DefinitionList,
    ItemAttributes,
)
from schemas.http.auth import Viewer
from schemas.http.errors import error_responses
from schemas.http.params import AttributeKey, AttributeVersion, Catalog, ItemId, Tenant

router = APIRouter(prefix="/v1", tags=["attributes"], responses=error_responses(401, 403, 503))

CATALOG = "/tenants/{tenant_id}/catalogs/{catalog_id}"


@router.get(CATALOG + "/classes", summary="The catalog's registered classes")
def list_classes(caller: Viewer, conn: Conn, tenant_id: Tenant, catalog_id: Catalog) -> ClassList:
    caller.require_tenant(tenant_id)
    return ClassList(
        classes=[
            CatalogClass.model_validate(r)
            for r in queries.list_classes(conn, tenant_id, catalog_id)
        ]
    )


@router.get(CATALOG + "/attributes", summary="Attribute definitions, every version")
def list_definitions(
    caller: Viewer,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    key: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="Only this attribute key's versions."),
    ] = None,
) -> DefinitionList:
    caller.require_tenant(tenant_id)
    found = queries.list_definitions(conn, tenant_id, catalog_id, key)
    return DefinitionList(definitions=[AttributeDefinition.model_validate(r) for r in found])


@router.get(
    CATALOG + "/attributes/{attribute_key}/versions/{version}",
    summary="One attribute definition version",
    responses=error_responses(404),
)
def read_definition(
    caller: Viewer,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    attribute_key: AttributeKey,
    version: AttributeVersion,
) -> AttributeDefinition:
    """404 ``ATTRIBUTE_NOT_FOUND`` for an unknown key or version."""
    caller.require_tenant(tenant_id)
    return AttributeDefinition.model_validate(
        queries.read_definition(conn, tenant_id, catalog_id, attribute_key, version)
    )


@router.get(
    CATALOG + "/items/{item_id}/attributes",
    summary="An item's current attribute values, with their definitions' labels and types",
    responses=error_responses(404),
)
def item_attributes(
    caller: Viewer, conn: Conn, tenant_id: Tenant, catalog_id: Catalog, item_id: ItemId
) -> ItemAttributes:
    """404 ``ITEM_NOT_FOUND`` for an unknown item."""
    caller.require_tenant(tenant_id)
    found = queries.item_values(conn, tenant_id, catalog_id, item_id)
    return ItemAttributes(
        item_id=found.item_id,
        class_id=found.class_id,
        lineage=found.lineage,
        values=[AttributeValue.of(v, d) for v, d in found.values],
    )
