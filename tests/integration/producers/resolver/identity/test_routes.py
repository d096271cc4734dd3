"""The identity-generation endpoints against real PostgreSQL: create and backfill,
resolve collisions, approve activation (each refusal with its stable code and
nothing changed), tenant scope, and the OpenAPI contract."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

from db.settings import DatabaseSettings
from producers.capture.adapters import CLAIM_FIELDS
from producers.resolver.identity.generations import create_generation
from tests.integration.producers.resolver.conftest import UowFactory
from tests.integration.producers.resolver.identity.conftest import BRAND_MPN, add, counts, h
from tests.integration.producers.resolver.test_routes import (
    CATALOG,
    EVIDENCE,
    auth,
    error,
    ok,
)
from tests.integration.producers.resolver.test_routes import api_settings as api_settings
from tests.integration.producers.resolver.test_routes import client as client

GENERATIONS = f"{CATALOG}/identity-generations"


def approval(revision: int, **changes: Any) -> dict[str, Any]:
    return {
        "actor": "reviewer:ana",
        "rationale": "spot-checked the backfill",
        "evidence": EVIDENCE,
        "expected_revision": revision,
        **changes,
    }


def resolution(holder: str | None) -> dict[str, Any]:
    return {
        "actor": "reviewer:ana",
        "rationale": "the capture shows one product",
        "evidence": EVIDENCE,
        "holder_item_id": holder,
    }


def test_create_resolve_approve(
    client: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "a", brand="ACME", mpn="X-1")
    add(uow, "b", brand="acme", mpn="x-1")
    add(uow, "c", brand="ACME", mpn="X-2")
    add(uow, "d", brand="ACME")
    created = ok(
        client.post(GENERATIONS, json={"class_id": "shoe", "rule_fields": ["brand", "mpn"]}), 201
    )
    assert {k: created[k] for k in ("item_count", "key_count", "collision_count")} == {
        "item_count": 4,
        "key_count": 1,
        "collision_count": 1,
    }
    assert created["unkeyed_item_count"] == 1
    generation = created["generation"]
    assert generation["status"] == "ready" and generation["generation"] == 1
    assert generation["unresolved_collisions"] == 1 and generation["key_count"] == 1
    path = f"{GENERATIONS}/shoe/1"

    before = counts(clean_db.resolver_dsn)
    error(
        client.post(f"{path}/approval", json=approval(generation["revision"])),
        409,
        "UNRESOLVED_COLLISIONS",
    )
    assert counts(clean_db.resolver_dsn) == before

    detail = ok(client.get(path))
    (collision,) = detail["collisions"]
    assert collision["candidate_item_ids"] == ["a", "b"] and collision["decision_id"] is None
    shared = collision["identity_hash"]
    assert shared == h("acme", "x-1")
    error(
        client.post(f"{path}/collisions/{shared}/resolution", json=resolution("c")),
        422,
        "INVALID_COLLISION_RESOLUTION",
    )
    resolved = ok(client.post(f"{path}/collisions/{shared}/resolution", json=resolution("b")), 201)
    error(
        client.post(f"{path}/collisions/{shared}/resolution", json=resolution("a")),
        409,
        "COLLISION_ALREADY_RESOLVED",
    )
    error(
        client.post(f"{path}/collisions/{h('no', 'one')}/resolution", json=resolution(None)),
        404,
        "COLLISION_NOT_FOUND",
    )
    # Approving what was reviewed before the resolution is stale.
    error(
        client.post(f"{path}/approval", json=approval(generation["revision"])),
        409,
        "STALE_REVISION",
    )
    current = ok(client.get(path))
    assert current["revision"] == generation["revision"] + 1
    assert current["unresolved_collisions"] == 0 and current["key_count"] == 2
    assert current["collisions"][0]["decision_id"] == resolved["decision_id"]

    approved = ok(client.post(f"{path}/approval", json=approval(current["revision"])), 201)
    assert [a["type"] for a in approved["aggregates"]] == ["decision"]
    active = ok(client.get(path))
    assert active["status"] == "active"
    assert active["activation_decision_id"] == approved["decision_id"]
    assert active["activated_at"] is not None and active["retired_at"] is None
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        recorded = conn.execute(
            "SELECT action, actor, actor_kind FROM decision WHERE decision_id = %s",
            (approved["decision_id"],),
        ).fetchone()
    assert recorded == ("approve_identity_generation", "reviewer:ana", "human")
    error(
        client.post(f"{path}/approval", json=approval(active["revision"])),
        409,
        "GENERATION_NOT_READY",
    )
    error(client.post(f"{path}/backfill"), 409, "GENERATION_ALREADY_ACTIVATED")

    # The next generation retires this one at the same time.
    by_gtin = ok(client.post(GENERATIONS, json={"class_id": "shoe", "rule_fields": ["gtin"]}), 201)
    second = by_gtin["generation"]
    ok(client.post(f"{GENERATIONS}/shoe/2/approval", json=approval(second["revision"])), 201)
    listed = ok(client.get(GENERATIONS, params={"class_id": "shoe"}))["generations"]
    assert [(g["generation"], g["status"]) for g in listed] == [(1, "retired"), (2, "active")]
    assert listed[0]["retired_at"] == listed[1]["activated_at"]
    assert ok(client.get(GENERATIONS, params={"class_id": "boot"}))["generations"] == []


def test_approval_while_backfilling_then_after_the_backfill(
    client: TestClient, uow: UowFactory
) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    with uow() as u:
        create_generation(u, "t1", "c1", "shoe", BRAND_MPN, CLAIM_FIELDS)
    path = f"{GENERATIONS}/shoe/1"
    error(client.post(f"{path}/approval", json=approval(1)), 409, "BACKFILL_INCOMPLETE")
    filled = ok(client.post(f"{path}/backfill"))
    assert filled["generation"]["status"] == "ready" and filled["key_count"] == 1
    add(uow, "late", brand="ACME", mpn="X-3")
    revision = filled["generation"]["revision"]
    error(client.post(f"{path}/approval", json=approval(revision)), 409, "BACKFILL_STALE")
    again = ok(client.post(f"{path}/backfill"))
    ok(client.post(f"{path}/approval", json=approval(again["generation"]["revision"])), 201)


def test_bad_requests_are_422_and_unknown_generations_404(client: TestClient) -> None:
    for rule in ([], ["brand", "brand"], [" brand"]):
        response = client.post(GENERATIONS, json={"class_id": "shoe", "rule_fields": rule})
        assert response.status_code == 422, response.text
        assert response.json()["code"] in ("VALIDATION_FAILED", "INVALID_IDENTITY")
    error(
        client.post(GENERATIONS, json={"class_id": "shoe", "rule_fields": ["a", "a"]}),
        422,
        "INVALID_IDENTITY",
    )
    error(client.get(f"{GENERATIONS}/shoe/1"), 404, "GENERATION_NOT_FOUND")
    error(client.post(f"{GENERATIONS}/shoe/1/backfill"), 404, "GENERATION_NOT_FOUND")
    error(
        client.post(f"{GENERATIONS}/shoe/1/approval", json=approval(1)), 404, "GENERATION_NOT_FOUND"
    )
    error(client.get(f"{GENERATIONS}/shoe/0"), 422, "VALIDATION_FAILED")
    error(
        client.post(f"{GENERATIONS}/shoe/1/approval", json=approval(1, evidence=[])),
        422,
        "VALIDATION_FAILED",
    )
    error(client.post(f"{GENERATIONS}/shoe/1/approval", json=approval(0)), 422, "VALIDATION_FAILED")
    error(
        client.post(f"{GENERATIONS}/shoe/1/collisions/NOTAHASH/resolution", json=resolution(None)),
        422,
        "VALIDATION_FAILED",
    )
    missing_holder = resolution(None)
    del missing_holder["holder_item_id"]
    error(
        client.post(f"{GENERATIONS}/shoe/1/collisions/{'a' * 64}/resolution", json=missing_holder),
        422,
        "VALIDATION_FAILED",
    )


def test_another_tenant_is_403_and_no_token_401(client: TestClient, uow: UowFactory) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    ok(client.post(GENERATIONS, json={"class_id": "shoe", "rule_fields": ["brand", "mpn"]}), 201)
    other = "/v1/tenants/t2/catalogs/c1/identity-generations"
    body = {"class_id": "shoe", "rule_fields": ["gtin"]}
    error(client.post(other, json=body), 403, "TENANT_SCOPE_DENIED")
    error(client.get(other), 403, "TENANT_SCOPE_DENIED")
    error(client.get(f"{other}/shoe/1"), 403, "TENANT_SCOPE_DENIED")
    error(client.post(f"{other}/shoe/1/backfill"), 403, "TENANT_SCOPE_DENIED")
    error(client.post(f"{other}/shoe/1/approval", json=approval(2)), 403, "TENANT_SCOPE_DENIED")
    error(
        client.post(f"{other}/shoe/1/collisions/{'a' * 64}/resolution", json=resolution(None)),
        403,
        "TENANT_SCOPE_DENIED",
    )
    for headers in ({"Authorization": ""}, auth("not-a-token")):
        error(
            client.post(f"{GENERATIONS}/shoe/1/approval", json=approval(2), headers=headers),
            401,
            "UNAUTHENTICATED",
        )
    assert ok(client.get(f"{GENERATIONS}/shoe/1"))["status"] == "ready"


def test_the_identity_endpoints_are_documented(client: TestClient) -> None:
    paths = ok(client.get("/openapi.json"))["paths"]
    base = "/v1/tenants/{tenant_id}/catalogs/{catalog_id}/identity-generations"
    generation = base + "/{class_id}/{generation}"
    assert set(paths[base]) == {"get", "post"}
    assert set(paths[generation]) == {"get"}
    approve = paths[generation + "/approval"]["post"]
    assert {"201", "401", "403", "404", "409", "422"} <= set(approve["responses"])
    assert "UNRESOLVED_COLLISIONS" in approve["description"]
    assert "BACKFILL_INCOMPLETE" in approve["description"]
    assert set(paths[generation + "/backfill"]) == {"post"}
    assert set(paths[generation + "/collisions/{identity_hash}/resolution"]) == {"post"}


def test_a_nested_class_id_with_slashes_is_addressable(
    client: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """Adapters name nested categories 'outdoor/camping/tents': every generation
    endpoint reaches such a class, not a 404 for a path it misread."""
    tents = "outdoor/camping/tents"
    add(uow, "t", class_id=tents, brand="ACME", mpn="T-1")
    created = ok(
        client.post(GENERATIONS, json={"class_id": tents, "rule_fields": ["brand", "mpn"]}), 201
    )
    path = f"{GENERATIONS}/{tents}/{created['generation']['generation']}"
    assert ok(client.get(path))["class_id"] == tents
    filled = ok(client.post(f"{path}/backfill"))
    ok(client.post(f"{path}/approval", json=approval(filled["generation"]["revision"])), 201)
    assert ok(client.get(path))["status"] == "active"
    error(client.get(f"{GENERATIONS}/{tents}/9"), 404, "GENERATION_NOT_FOUND")


def generation_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM identity_generation").fetchone()
    assert row is not None
    return int(row[0])


def test_a_rule_naming_a_field_no_item_can_have_is_refused_and_nothing_stored(
    client: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """A field counts when a capture can state it (an adapter stores it on products:
    the title, identifiers, attributes) or an active item of the class carries it."""
    add(uow, "a", brand="ACME", mpn="X-1")
    add(uow, "novel", class_id="book", isbn="978-0-00-000000-2")
    before = (counts(clean_db.resolver_dsn), generation_rows(clean_db.resolver_dsn))
    for rule in (["brand", "mpn_typo"], ["isbn"], ["price"]):  # an offer's price is no claim
        body = error(
            client.post(GENERATIONS, json={"class_id": "shoe", "rule_fields": rule}),
            422,
            "UNKNOWN_IDENTITY_FIELD",
        )
        assert repr([f for f in rule if f not in ("brand",)]) in body["message"]
    assert (counts(clean_db.resolver_dsn), generation_rows(clean_db.resolver_dsn)) == before
    # Carried by an item of the class (written by a decision, not by a capture):
    ok(client.post(GENERATIONS, json={"class_id": "book", "rule_fields": ["isbn"]}), 201)
    # Stated by captures, though no item of the class exists yet (a rule set up
    # before the first capture arrives):
    ok(client.post(GENERATIONS, json={"class_id": "tent", "rule_fields": ["colour"]}), 201)
    ok(client.post(GENERATIONS, json={"class_id": "shoe", "rule_fields": ["title"]}), 201)
