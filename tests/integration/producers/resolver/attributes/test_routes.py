"""Attributes through the operator API against real PostgreSQL: the decision
endpoint accepts the attribute facts, refuses INV-07 violations with their stable
codes (leaving the case where it was), and the read endpoints show what was
accepted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from db.settings import DatabaseSettings
from producers.api import create_app
from producers.resolver.catalog_items import ItemChange
from producers.settings import ApiSettings
from schemas.http.auth import token_hash
from tests.fixtures.decisions import accept
from tests.integration.producers.resolver.conftest import UowFactory
from tests.integration.producers.resolver.test_routes import (
    CATALOG,
    T1_TOKEN,
    auth,
    decision,
    error,
    ok,
    open_cases,
)


@pytest.fixture()
def api(clean_db: DatabaseSettings) -> Iterator[TestClient]:
    settings = ApiSettings(
        api_tokens=SecretStr(f"{token_hash(T1_TOKEN)}:t1"),
        resolver_dsn=clean_db.resolver_dsn,
        control_dsn=clean_db.control_dsn,
    )
    with TestClient(create_app(settings), headers=auth(T1_TOKEN)) as test_client:
        yield test_client


def add_item(uow: UowFactory, item_id: str, class_id: str) -> None:
    with uow() as u:
        accept(u, "t1", "c1", ItemChange("t1", "c1", item_id, class_id, f"item {item_id}"))


def decide(api: TestClient, case: str, revision: int, *facts: dict[str, Any]) -> Any:
    return api.post(f"{CATALOG}/review-cases/{case}/decisions", json=decision(revision, *facts))


CLASSES = [
    {"kind": "define_class", "class_id": "footwear"},
    {"kind": "define_class", "class_id": "shoe", "parent_class_id": "footwear"},
]
SIZE = {
    "kind": "define_attribute",
    "attribute_key": "size",
    "version": 1,
    "label": "Size (EU)",
    "value_type": "number",
    "applies_to": ["footwear"],
    "publish": True,
}
FIT = {
    "kind": "define_attribute",
    "attribute_key": "fit",
    "version": 1,
    "label": "Fit",
    "value_type": "enum",
    "allowed_values": ["narrow", "wide"],
    "applies_to": ["shoe"],
}


def set_value(item: str, key: str, value: Any, version: int = 1) -> dict[str, Any]:
    return {
        "kind": "set_attribute_value",
        "item_id": item,
        "attribute_key": key,
        "version": version,
        "value": value,
    }


def case_revision(dsn: str, case: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT revision FROM review_case WHERE case_id = %s", (case,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_attribute_facts_are_decided_and_read_back(
    api: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1", "shoe")
    open_cases(uow, "case-1", "case-2", subject="i1")
    body = ok(decide(api, "case-1", 1, *CLASSES, SIZE, FIT, set_value("i1", "size", 42.5)), 201)
    assert [(a["type"], a["id"], a["revision"]) for a in body["aggregates"][1:]] == [
        ("catalog_class", "footwear", 1),
        ("catalog_class", "shoe", 1),
        ("attribute_definition", "size/1", 1),
        ("attribute_definition", "fit/1", 1),
        ("attribute_value", "i1/size", 1),
    ]
    published = {"kind": "publish_attribute", "attribute_key": "fit", "version": 1}
    ok(decide(api, "case-2", 1, published, set_value("i1", "fit", "wide")), 201)

    classes = ok(api.get(f"{CATALOG}/classes"))["classes"]
    assert [(c["class_id"], c["parent_class_id"]) for c in classes] == [
        ("footwear", None),
        ("shoe", "footwear"),
    ]
    definitions = ok(api.get(f"{CATALOG}/attributes"))["definitions"]
    assert [(d["attribute_key"], d["status"], d["revision"]) for d in definitions] == [
        ("fit", "published", 2),
        ("size", "published", 1),
    ]
    fit = ok(api.get(f"{CATALOG}/attributes/fit/versions/1"))
    assert (fit["allowed_values"], fit["applies_to"]) == (["narrow", "wide"], ["shoe"])
    only_size = ok(api.get(f"{CATALOG}/attributes", params={"key": "size"}))["definitions"]
    assert [d["attribute_key"] for d in only_size] == ["size"]

    item = ok(api.get(f"{CATALOG}/items/i1/attributes"))
    assert (item["class_id"], item["lineage"]) == ("shoe", ["shoe", "footwear"])
    assert [
        (v["attribute_key"], v["label"], v["value_type"], v["value"], v["revision"])
        for v in item["values"]
    ] == [("fit", "Fit", "enum", "wide", 1), ("size", "Size (EU)", "number", "42.5", 1)]


def test_violations_answer_their_codes_and_leave_the_case_as_it_was(
    api: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1", "shoe")
    add_item(uow, "i2", "hat")
    open_cases(uow, "case-1", "case-2", subject="i1")
    ok(decide(api, "case-1", 1, *CLASSES, SIZE, FIT), 201)
    refusals = [
        (409, "ATTRIBUTE_NOT_APPLICABLE", set_value("i2", "size", 40)),
        (409, "ATTRIBUTE_NOT_PUBLISHED", set_value("i1", "fit", "wide")),
        (404, "ATTRIBUTE_NOT_FOUND", set_value("i1", "size", 40, version=2)),
        (422, "ATTRIBUTE_VALUE_INVALID", set_value("i1", "size", "forty")),
        (422, "ATTRIBUTE_VALUE_INVALID", set_value("i1", "size", True)),
        (409, "ATTRIBUTE_VERSION_EXISTS", SIZE),
        (409, "CLASS_REPARENT_REFUSED", {"kind": "define_class", "class_id": "shoe"}),
        (422, "PARENT_CLASS_NOT_FOUND", {**CLASSES[1], "class_id": "x", "parent_class_id": "y"}),
        (422, "ATTRIBUTE_DEFINITION_INVALID", {**FIT, "version": 2, "allowed_values": []}),
        (422, "ATTRIBUTE_DEFINITION_INVALID", {**SIZE, "attribute_key": "a/b"}),
        (422, "VALIDATION_FAILED", set_value("i1", "size", [40])),
        (422, "VALIDATION_FAILED", {**SIZE, "value_type": "date"}),
    ]
    for status, code, fact in refusals:
        error(decide(api, "case-2", 1, fact), status, code)
        assert case_revision(clean_db.resolver_dsn, "case-2") == 1, code
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM attribute_value").fetchone() == (0,)


def test_reads_answer_404_and_403(api: TestClient, uow: UowFactory) -> None:
    add_item(uow, "i1", "shoe")
    error(api.get(f"{CATALOG}/attributes/size/versions/1"), 404, "ATTRIBUTE_NOT_FOUND")
    error(api.get(f"{CATALOG}/items/nope/attributes"), 404, "ITEM_NOT_FOUND")
    error(api.get(f"{CATALOG}/attributes/size/versions/0"), 422, "VALIDATION_FAILED")
    other = "/v1/tenants/t2/catalogs/c1"
    for path in ("/classes", "/attributes", "/items/i1/attributes"):
        error(api.get(other + path), 403, "TENANT_SCOPE_DENIED")
    assert ok(api.get(f"{CATALOG}/items/i1/attributes"))["values"] == []
