"""What the read API serves of one generation: items page by page (every item once),
one item with its listing mappings, attribute values and splits, shipping-policy
versions, and a ranked search over titles and attribute values."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient

from tests.integration.processors.serving.conftest import (
    CATALOG,
    TENANT,
    Catalog,
    auth,
    error,
    ok,
)
from tests.unit.processors.builders import T0

BASE = f"/v1/tenants/{TENANT}/catalogs/{CATALOG}"


def walk(client: TestClient, path: str, key: str, **params: Any) -> list[list[dict[str, Any]]]:
    """Every page of a listing, following ``next_cursor`` to the end."""
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        body = ok(client.get(BASE + path, params=query, headers=auth()))
        pages.append(body[key])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 100, "the walk does not end"


def test_a_walk_through_the_items_sees_every_item_once_in_order(
    catalog: Catalog, client: TestClient
) -> None:
    catalog.epoch()
    ids = [f"item-{n:03d}" for n in range(47)] + ["a/b", "a/b/c"]  # ids may hold slashes
    for item_id in ids:
        status = "retired" if item_id.endswith("7") else "active"
        catalog.apply(1, catalog.item(item_id, f"title {item_id}", status=status))
    catalog.apply(2, catalog.item("only-in-2", "x"))
    catalog.serve(1)

    pages = walk(client, "/items", "items", limit=10)
    assert [len(p) for p in pages] == [10, 10, 10, 10, 9]
    walked = [i["item_id"] for p in pages for i in p]
    assert walked == sorted(ids)

    active = [
        i["item_id"] for p in walk(client, "/items", "items", limit=7, status="active") for i in p
    ]
    assert active == sorted(i for i in ids if not i.endswith("7"))

    exact = walk(client, "/items", "items", limit=49)  # a full last page: no empty one after
    assert [len(p) for p in exact] == [49]


def test_a_cursor_is_refused_for_other_filters_or_when_it_is_not_one_issued(
    catalog: Catalog, client: TestClient
) -> None:
    catalog.epoch()
    for n in range(3):
        catalog.apply(1, catalog.item(f"i{n}", "boot"))
    catalog.serve(1)
    cursor = ok(client.get(f"{BASE}/items", params={"limit": 1}, headers=auth()))["next_cursor"]
    assert cursor

    for params in (
        {"cursor": cursor, "status": "active"},  # other filters
        {"cursor": "not-a-cursor"},
        {"cursor": cursor[:-3]},
    ):
        response = client.get(f"{BASE}/items", params=params, headers=auth())
        assert error(response, 400) == "CURSOR_INVALID"
    search = client.get(f"{BASE}/search", params={"q": "boot", "cursor": cursor}, headers=auth())
    assert error(search, 400) == "CURSOR_INVALID"  # another listing's
    assert error(client.get(f"{BASE}/items", params={"limit": 201}, headers=auth()), 422) == (
        "VALIDATION_FAILED"
    )


def test_an_item_comes_with_its_listings_attribute_values_and_splits(
    catalog: Catalog, client: TestClient
) -> None:
    catalog.epoch()
    split_id = uuid.UUID("00000000-0000-4000-8000-0000000000aa")
    earlier = uuid.UUID("00000000-0000-4000-8000-0000000000bb")
    catalog.apply(
        1,
        catalog.definition("colour", "Colour"),
        catalog.definition("size", "Size"),
        catalog.item("boot", "Hiking boot", revision=2, status="split", attributes={"sku": "B1"}),
        catalog.item("boot-l", "Hiking boot L"),
        catalog.item("boot-s", "Hiking boot S"),
        catalog.item("other", "Sandal"),
        catalog.value("boot", "size", "42"),
        catalog.value("boot", "colour", "brown"),
        catalog.mapping("L2", "boot"),
        catalog.mapping("L1", "boot"),
        catalog.mapping("L9", "other"),
        catalog.split(split_id, "boot", ("boot-l", "boot-s")),
        catalog.split(earlier, "older", ("boot",)),
    )
    catalog.serve(1)

    detail = ok(client.get(f"{BASE}/items/boot", headers=auth()))
    item = detail["item"]
    assert (item["title"], item["status"], item["revision"]) == ("Hiking boot", "split", 2)
    assert item["attributes"] == {"sku": "B1"}
    assert [m["listing_id"] for m in detail["listing_mappings"]] == ["L1", "L2"]
    assert [(v["attribute_key"], v["label"], v["value"]) for v in detail["attribute_values"]] == [
        ("colour", "Colour", "brown"),
        ("size", "Size", "42"),
    ]
    assert detail["split_into"]["split_id"] == str(split_id)
    assert detail["split_into"]["successor_item_ids"] == ["boot-l", "boot-s"]
    assert detail["split_into"]["remaps"] == {"L-boot-l": "boot-l", "L-boot-s": "boot-s"}
    assert [s["split_id"] for s in detail["split_from"]] == [str(earlier)]

    successor = ok(client.get(f"{BASE}/items/boot-l", headers=auth()))
    assert successor["split_into"] is None
    assert [s["source_item_id"] for s in successor["split_from"]] == ["boot"]
    assert successor["listing_mappings"] == successor["attribute_values"] == []
    assert error(client.get(f"{BASE}/items/nope", headers=auth()), 404) == (
        "PRODUCT_ITEM_NOT_FOUND"
    )


def test_shipping_policy_versions_page_by_page_by_scope_and_time(
    catalog: Catalog, client: TestClient
) -> None:
    catalog.epoch()
    day = timedelta(days=1)
    events = [
        catalog.policy("std", 1, "DE", T0, T0 + 10 * day),
        catalog.policy("std", 2, "DE", T0 + 10 * day),
        catalog.policy("std", 3, "AT", T0),
        catalog.policy("express", 1, "DE", T0 + 5 * day, T0 + 6 * day),
    ]
    catalog.apply(1, *events)
    catalog.serve(1)

    pages = walk(client, "/shipping-policies", "versions", limit=3)
    assert [(v["policy_id"], v["version"]) for p in pages for v in p] == [
        ("express", 1),
        ("std", 1),
        ("std", 2),
        ("std", 3),
    ]
    at = (T0 + 5 * day).isoformat()
    in_force = walk(client, "/shipping-policies", "versions", scope="DE", in_force_at=at, limit=1)
    assert [(v["policy_id"], v["version"]) for p in in_force for v in p] == [
        ("express", 1),
        ("std", 1),
    ]
    first = ok(client.get(f"{BASE}/shipping-policies", params={"limit": 1}, headers=auth()))
    assert first["versions"][0]["terms"] == {"carrier": "c1"}
    assert first["versions"][0]["effective_to"] is not None


def test_search_finds_items_by_title_and_attribute_words_best_first(
    catalog: Catalog, client: TestClient
) -> None:
    catalog.epoch()
    catalog.apply(
        1,
        catalog.definition("material", "Material"),
        catalog.item("a", "Leather hiking boot"),
        catalog.item("b", "Trail runner", attributes={"upper": "leather mesh"}),
        catalog.item("c", "Sandal", status="retired"),
        catalog.item("d", "Wool sock"),
        catalog.value("c", "material", "Leather"),
        catalog.value("d", "material", "merino"),
    )
    catalog.serve(1)

    def hits(q: str, **params: Any) -> list[str]:
        body = ok(client.get(f"{BASE}/search", params={"q": q, **params}, headers=auth()))
        return [h["item_id"] for h in body["hits"]]

    assert hits("leather") == ["a", "b", "c"]  # the title match ranks first
    assert hits("LEATHER", status="active") == ["a", "b"]
    assert hits("merino") == ["d"]  # an attribute value
    assert hits("mesh") == ["b"]  # the item's own attributes
    assert hits("leather -boot") == ["b", "c"]
    assert hits('"hiking boot"') == ["a"]
    assert hits("sock or sandal") == ["c", "d"]
    assert hits("boots") == []  # word for word: no stemming
    assert hits("!!!") == []  # no words at all


def test_a_search_walk_sees_every_hit_once_among_equal_ranks(
    catalog: Catalog, client: TestClient
) -> None:
    catalog.epoch()
    for n in range(25):
        catalog.apply(1, catalog.item(f"i{n:02d}", "red boot" if n % 5 else "red red boot"))
    catalog.serve(1)

    pages = walk(client, "/search", "hits", q="red", limit=4)
    walked = [h["item_id"] for p in pages for h in p]
    assert sorted(walked) == [f"i{n:02d}" for n in range(25)]
    assert len(walked) == 25
    ranks = [h["rank"] for p in pages for h in p]
    assert ranks == sorted(ranks, reverse=True)
    assert walked[:5] == ["i00", "i05", "i10", "i15", "i20"]  # "red" twice ranks higher
