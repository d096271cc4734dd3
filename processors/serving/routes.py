"""The read API's routes: every one reads through ``SnapshotReader`` (one snapshot
of the serving generation) and needs the viewer role on the tenant in its path."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, cast

import psycopg
from fastapi import APIRouter, Depends, Query, Request

from db.product import serving as sql
from processors.serving import cursors
from processors.serving.exceptions import ProductItemNotFound
from processors.serving.http_models import (
    AttributeValue,
    Item,
    ItemDetail,
    ItemPage,
    ItemSummary,
    ListingMapping,
    PolicyPage,
    PolicyVersion,
    SearchHit,
    SearchPage,
    ServedFrom,
    Split,
)
from processors.serving.snapshot import SnapshotReader
from schemas.http.auth import Viewer
from schemas.http.errors import error_responses
from schemas.http.fields import UtcDatetime
from schemas.http.params import MAX_ID, Catalog, ItemId, Tenant

MAX_PAGE = 200
CATALOG = "/v1/tenants/{tenant_id}/catalogs/{catalog_id}"

router = APIRouter(tags=["read"], responses=error_responses(400, 401, 403, 404, 422, 503))


def reader(request: Request) -> SnapshotReader:
    return cast(SnapshotReader, request.app.state.reader)


Reader = Annotated[SnapshotReader, Depends(reader)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="At most this many.")]
CursorParam = Annotated[
    str | None,
    Query(max_length=2000, description="The `next_cursor` of the previous page."),
]
Status = Annotated[
    str | None, Query(min_length=1, max_length=MAX_ID, description="Only items of this status.")
]


def _after(text: str | None, binding: str, shape: tuple[type, ...]) -> tuple[object, ...] | None:
    return None if text is None else cursors.decode(text, binding, shape).after


def _next(binding: str, rows_beyond: bool, key: cursors.Key, served: sql.Served) -> str | None:
    if not rows_beyond:
        return None
    return cursors.encode(cursors.Cursor(binding, key, served.generation))


@router.get(CATALOG + "/items", summary="Items of the catalog, in item-id order")
def list_items(
    tenant_id: Tenant,
    catalog_id: Catalog,
    _viewer: Viewer,
    read: Reader,
    limit: Limit = 50,
    cursor: CursorParam = None,
    status: Status = None,
) -> ItemPage:
    bound = cursors.binding("items", [status])
    after = _after(cursor, bound, (str,))
    start = None if after is None else cast(str, after[0])

    def rows(conn: psycopg.Connection, served: sql.Served) -> list[sql.ItemRow]:
        return sql.item_page(
            conn, served.generation, tenant_id, catalog_id, start, limit + 1, status
        )

    served, found = read.read(tenant_id, catalog_id, rows)
    page = found[:limit]
    return ItemPage(
        served_from=ServedFrom.of(served),
        items=[
            ItemSummary(
                item_id=r.item_id,
                class_id=r.class_id,
                status=r.status,
                title=r.title,
                parent_item_id=r.parent_item_id,
                revision=r.revision,
            )
            for r in page
        ],
        next_cursor=_next(bound, len(found) > limit, (page[-1].item_id,) if page else (), served),
    )


@router.get(CATALOG + "/search", summary="Items whose title or attribute values match")
def search(
    tenant_id: Tenant,
    catalog_id: Catalog,
    _viewer: Viewer,
    read: Reader,
    q: Annotated[
        str,
        Query(
            min_length=1,
            max_length=MAX_ID,
            description='Words to find (web-search syntax: "a phrase", `or`, `-word`);'
            " matched word for word, case-insensitively, in titles and attribute values.",
        ),
    ],
    limit: Limit = 20,
    cursor: CursorParam = None,
    status: Status = None,
) -> SearchPage:
    """Best first: ``ts_rank`` of the item's search document (title words weigh more
    than attribute values), then item id."""
    bound = cursors.binding("search", [q, status])
    after = _after(cursor, bound, (float, str))
    start = None if after is None else (cast(float, after[0]), cast(str, after[1]))

    def rows(conn: psycopg.Connection, served: sql.Served) -> list[sql.HitRow]:
        return sql.search_page(
            conn, served.generation, tenant_id, catalog_id, q, start, limit + 1, status
        )

    served, found = read.read(tenant_id, catalog_id, rows)
    page = found[:limit]
    last = (page[-1].rank, page[-1].item_id) if page else ()
    return SearchPage(
        served_from=ServedFrom.of(served),
        hits=[
            SearchHit(item_id=h.item_id, title=h.title, status=h.status, rank=h.rank) for h in page
        ],
        next_cursor=_next(bound, len(found) > limit, last, served),
    )


@router.get(
    CATALOG + "/shipping-policies",
    summary="Shipping-policy versions of the catalog, in (policy, version) order",
)
def list_policy_versions(
    tenant_id: Tenant,
    catalog_id: Catalog,
    _viewer: Viewer,
    read: Reader,
    limit: Limit = 50,
    cursor: CursorParam = None,
    scope: Annotated[
        str | None, Query(min_length=1, max_length=MAX_ID, description="Only this scope.")
    ] = None,
    in_force_at: Annotated[
        UtcDatetime | None, Query(description="Only versions whose window holds this time.")
    ] = None,
) -> PolicyPage:
    at: datetime | None = in_force_at
    bound = cursors.binding("shipping-policies", [scope, None if at is None else at.isoformat()])
    after = _after(cursor, bound, (str, int))
    start = None if after is None else (cast(str, after[0]), cast(int, after[1]))

    def rows(conn: psycopg.Connection, served: sql.Served) -> list[sql.PolicyRow]:
        return sql.policy_page(
            conn, served.generation, tenant_id, catalog_id, start, limit + 1, scope, at
        )

    served, found = read.read(tenant_id, catalog_id, rows)
    page = found[:limit]
    last = (page[-1].policy_id, page[-1].version) if page else ()
    return PolicyPage(
        served_from=ServedFrom.of(served),
        versions=[
            PolicyVersion(
                policy_id=p.policy_id,
                version=p.version,
                scope=p.scope,
                effective_from=p.effective_from,
                effective_to=p.effective_to,
                terms=p.terms,
                decision_id=p.decision_id,
            )
            for p in page
        ],
        next_cursor=_next(bound, len(found) > limit, last, served),
    )


@router.get(
    CATALOG + "/items/{item_id:path}",
    summary="One item with its listing mappings, attribute values and splits",
)
def get_item(
    tenant_id: Tenant, catalog_id: Catalog, item_id: ItemId, _viewer: Viewer, read: Reader
) -> ItemDetail:
    def rows(
        conn: psycopg.Connection, served: sql.Served
    ) -> tuple[sql.ItemRow | None, list[sql.MappingRow], list[sql.ValueRow], list[sql.SplitRow]]:
        g = served.generation
        row = sql.item(conn, g, tenant_id, catalog_id, item_id)
        if row is None:
            return None, [], [], []
        return (
            row,
            sql.listing_mappings_of(conn, g, tenant_id, catalog_id, item_id),
            sql.attribute_values_of(conn, g, tenant_id, catalog_id, item_id),
            sql.splits_of(conn, g, tenant_id, catalog_id, item_id),
        )

    served, (row, mappings, values, splits) = read.read(tenant_id, catalog_id, rows)
    if row is None:
        raise ProductItemNotFound(
            f"generation {served.generation} of catalog {catalog_id!r} has no item {item_id!r}"
        )
    as_split = [
        Split(
            split_id=s.split_id,
            source_item_id=s.source_item_id,
            source_revision=s.source_revision,
            successor_item_ids=s.successor_item_ids,
            remaps=s.remaps,
            decision_id=s.decision_id,
        )
        for s in splits
    ]
    return ItemDetail(
        served_from=ServedFrom.of(served),
        item=Item.of(row),
        listing_mappings=[
            ListingMapping(
                listing_id=m.listing_id,
                item_revision=m.item_revision,
                decision_id=m.decision_id,
                revision=m.revision,
            )
            for m in mappings
        ],
        attribute_values=[
            AttributeValue(
                attribute_key=v.attribute_key,
                label=v.label,
                definition_version=v.definition_version,
                value_type=v.value_type,
                value=v.value,
                item_revision=v.item_revision,
                decision_id=v.decision_id,
                revision=v.revision,
            )
            for v in values
        ],
        split_into=next((s for s in as_split if s.source_item_id == item_id), None),
        split_from=[s for s in as_split if s.source_item_id != item_id],
    )
