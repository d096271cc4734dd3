"""GET /v1/receipts/{id}: the ownership matrix. Collectors are matched by instance
(never by client id), so a rotated credential keeps access; operators read any
receipt of the tenants their token is scoped to."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from fastapi.testclient import TestClient

from db.settings import DatabaseSettings
from producers.capture.intake import collectors

from .conftest import OPERATOR_T1, OPERATOR_T2, CollectorKey, bearer, capture_body, post, register


@pytest.fixture()
def receipt(client: TestClient, collector: str) -> dict[str, str]:
    response = post(client, collector, capture_body())
    assert response.status_code == 201
    return dict(response.json())


def _get(client: TestClient, receipt_id: str, token: str | None) -> tuple[int, str | None]:
    response = client.get(f"/v1/receipts/{receipt_id}", headers=bearer(token) if token else {})
    code = None if response.status_code == 200 else response.json()["code"]
    return response.status_code, code


def test_the_ownership_matrix(
    client: TestClient,
    clean_db: DatabaseSettings,
    collector_key: CollectorKey,
    collector: str,
    receipt: dict[str, str],
) -> None:
    register(clean_db, "client-b", "t1", "shop", "inst-b")  # same tenant and source
    register(clean_db, "client-c", "t2", "shop", "inst-a")  # another tenant, same names
    register(clean_db, "client-d", "t1", "market", "inst-a")  # same tenant, other source
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        collectors.rotate(conn, "client-a", "client-a2", revoke_old=False)
        collectors.register(conn, "client-a3", "t1", "shop", "inst-a")  # a third credential
    rid = receipt["receipt_id"]
    cases = {
        "owner": (collector, (200, None)),
        "rotated credential": (collector_key.token("client-a2"), (200, None)),
        "another credential of the instance": (collector_key.token("client-a3"), (200, None)),
        "other instance": (collector_key.token("client-b"), (403, "INSTANCE_SCOPE_DENIED")),
        "other source": (collector_key.token("client-d"), (403, "INSTANCE_SCOPE_DENIED")),
        "other tenant": (collector_key.token("client-c"), (403, "TENANT_SCOPE_DENIED")),
        "operator of the tenant": (OPERATOR_T1, (200, None)),
        "operator of another tenant": (OPERATOR_T2, (403, "TENANT_SCOPE_DENIED")),
        "no token": (None, (401, "UNAUTHENTICATED")),
        "unknown token": ("not-a-token", (401, "UNAUTHENTICATED")),
    }
    got = {name: _get(client, rid, token) for name, (token, _) in cases.items()}
    assert got == {name: expected for name, (_, expected) in cases.items()}
    unknown = str(uuid.uuid4())
    assert _get(client, unknown, collector) == (404, "NOT_FOUND")
    assert _get(client, unknown, OPERATOR_T1) == (404, "NOT_FOUND")


def test_a_rotated_credential_reads_and_replays_after_the_old_one_is_revoked(
    client: TestClient,
    clean_db: DatabaseSettings,
    collector_key: CollectorKey,
    collector: str,
) -> None:
    body = capture_body()
    first = post(client, collector, body, key="before-rotation").json()
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        collectors.rotate(conn, "client-a", "client-a2", revoke_old=True)
    new = collector_key.token("client-a2")
    assert _get(client, first["receipt_id"], collector) == (401, "UNAUTHENTICATED")
    assert _get(client, first["receipt_id"], new) == (200, None)
    replay = post(client, new, body, key="before-rotation")  # same instance, same key
    assert replay.status_code == 200 and replay.json() == first


def test_a_receipt_reads_as_it_was_answered(
    client: TestClient, collector: str, receipt: dict[str, str]
) -> None:
    response = client.get(f"/v1/receipts/{receipt['receipt_id']}", headers=bearer(collector))
    assert response.json() == receipt
