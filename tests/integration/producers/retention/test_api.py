"""The retention endpoints of the resolver API against real PostgreSQL: every happy
path, and every error as ``{"code", "message"}`` with its stable code."""

from __future__ import annotations

import base64
import re
import time
import uuid
from typing import Any

import httpx
import psycopg
from fastapi.testclient import TestClient

from db.settings import DatabaseSettings
from producers.retention.pruner import RetentionPolicy, prune_stream
from schemas.codec import CODEC
from schemas.ids import StreamId
from tests.integration.producers.retention.conftest import ALL_TOKEN, auth
from tests.integration.producers.retention.streams import (
    expire_lease,
    publish,
    ready_stream,
    write_events,
)

STREAM = "/v1/streams/t1/c1/1"
EVERYTHING = RetentionPolicy(age_seconds=0, batch_size=1000)


def error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    assert body["message"]
    return body


def prune(settings: DatabaseSettings, stream: StreamId) -> int:
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        return prune_stream(conn, stream, EVERYTHING).pruned_through


def lease(client: TestClient, ttl: int = 60, tenant: str = "t1", **headers: str) -> dict[str, Any]:
    body = {"tenant_id": tenant, "catalog_id": "c1", "history_epoch": 1, "holder": "rebuild-7"}
    response = client.post("/v1/leases", json={**body, "ttl_seconds": ttl}, headers=headers)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


# Authentication and tenant scope ----------------------------------------------------


def test_no_token_or_an_unknown_one_is_401(client: TestClient) -> None:
    for headers in ({"Authorization": ""}, auth("not-a-configured-token")):
        response = client.get(STREAM + "/events", headers=headers)
        error(response, 401, "UNAUTHENTICATED")
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_a_tenant_outside_the_token_scope_is_403(
    client: TestClient, clean_db: DatabaseSettings
) -> None:
    write_events(clean_db, "t2", "c1", 3)
    for method, path in [
        ("PUT", "/v1/streams/t2/c1/1/consumers/app"),
        ("DELETE", "/v1/streams/t2/c1/1/consumers/app"),
        ("GET", "/v1/streams/t2/c1/1/events"),
        ("GET", "/v1/streams/t2/c1/1"),
    ]:
        error(client.request(method, path), 403, "TENANT_SCOPE_DENIED")
    error(
        client.post("/v1/streams/t2/c1/1/consumers/app/progress", json={"position": 1}),
        403,
        "TENANT_SCOPE_DENIED",
    )
    body = {"tenant_id": "t2", "catalog_id": "c1", "history_epoch": 1, "holder": "h"}
    error(client.post("/v1/leases", json={**body, "ttl_seconds": 60}), 403, "TENANT_SCOPE_DENIED")

    # Another tenant's lease, taken with a token that may act on every tenant.
    other = lease(client, tenant="t2", **auth(ALL_TOKEN))["lease_id"]
    for method, path, json in [
        ("POST", f"/v1/leases/{other}/renew", None),
        ("POST", f"/v1/leases/{other}/advance", {"position": 1}),
        ("DELETE", f"/v1/leases/{other}", None),
    ]:
        error(client.request(method, path, json=json), 403, "TENANT_SCOPE_DENIED")
    exports = client.get("/v1/exports/events", params={"lease_id": other, "history_epoch": 1})
    error(exports, 403, "TENANT_SCOPE_DENIED")


# Consumers ------------------------------------------------------------------------


def test_registration_is_idempotent(client: TestClient, clean_db: DatabaseSettings) -> None:
    write_events(clean_db, "t1", "c1", 3)
    first = client.put(STREAM + "/consumers/product-applier")
    assert first.status_code == 200, first.text
    assert first.json() == {
        "tenant_id": "t1",
        "catalog_id": "c1",
        "history_epoch": 1,
        "consumer_id": "product-applier",
        "reported_position": None,
        "pruned_through": 0,
    }
    assert client.put(STREAM + "/consumers/product-applier").json() == first.json()
    error(client.put(STREAM + "/consumers/bad%20name"), 422, "VALIDATION_FAILED")


def test_progress_is_monotonic_and_registers_implicitly(
    client: TestClient, clean_db: DatabaseSettings
) -> None:
    write_events(clean_db, "t1", "c1", 10)
    url = STREAM + "/consumers/app/progress"
    assert client.post(url, json={"position": 6}).json() == {"reported_position": 6}
    assert client.post(url, json={"position": 3}).json() == {"reported_position": 6}
    assert client.post(url, json={"position": 9}).json() == {"reported_position": 9}
    registered = client.put(STREAM + "/consumers/app").json()
    assert registered["reported_position"] == 9

    error(client.post(url, json={"position": 11}), 409, "POSITION_BEYOND_COMMITTED")
    error(client.post(url, json={"position": -1}), 422, "VALIDATION_FAILED")
    error(client.post(url, json={}), 422, "VALIDATION_FAILED")
    assert client.post(url, json={"position": 3}).json() == {"reported_position": 9}


def test_deregistration(client: TestClient, clean_db: DatabaseSettings) -> None:
    write_events(clean_db, "t1", "c1", 2)
    client.put(STREAM + "/consumers/app")
    assert client.delete(STREAM + "/consumers/app").status_code == 204
    error(client.delete(STREAM + "/consumers/app"), 404, "CONSUMER_NOT_FOUND")
    assert client.get(STREAM).json()["consumers"] == []


# Retained events ------------------------------------------------------------------


def test_events_are_pages_of_the_stored_bytes_in_order(
    client: TestClient, clean_db: DatabaseSettings
) -> None:
    stream = write_events(clean_db, "t1", "c1", 12)
    page = client.get(STREAM + "/events", params={"after": 0, "limit": 5})
    assert page.status_code == 200, page.text
    body = page.json()
    assert (body["tenant_id"], body["catalog_id"], body["history_epoch"]) == ("t1", "c1", 1)
    assert (body["committed_position"], body["pruned_through"]) == (12, 0)
    assert [e["position"] for e in body["events"]] == [1, 2, 3, 4, 5]
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        stored = conn.execute(
            "SELECT event_id, event_type, key, value FROM outbox WHERE position = 1"
        ).fetchone()
    assert stored is not None
    first = body["events"][0]
    assert (first["event_id"], first["event_type"]) == (str(stored[0]), stored[1])
    assert base64.b64decode(first["key"]) == stored[2]
    assert base64.b64decode(first["value"]) == stored[3]
    assert CODEC.decode_value(base64.b64decode(first["value"])).position == 1

    tail = client.get(STREAM + "/events", params={"after": 10}).json()
    assert [e["position"] for e in tail["events"]] == [11, 12]
    assert client.get(STREAM + "/events", params={"after": 12}).json()["events"] == []
    default = client.get(STREAM + "/events").json()
    assert len(default["events"]) == 12
    error(client.get(STREAM + "/events", params={"limit": 5001}), 422, "VALIDATION_FAILED")

    assert prune(clean_db, stream) == 0  # nothing published yet
    publish(clean_db, stream, 4)
    assert prune(clean_db, stream) == 4
    error(client.get(STREAM + "/events", params={"after": 3}), 410, "CURSOR_PRUNED")
    resumed = client.get(STREAM + "/events", params={"after": 4}).json()
    assert resumed["pruned_through"] == 4
    assert [e["position"] for e in resumed["events"]][:2] == [5, 6]


# Stream state ---------------------------------------------------------------------


def test_stream_state_names_the_consumer_holding_the_floor(
    client: TestClient, clean_db: DatabaseSettings
) -> None:
    stream = ready_stream(clean_db, n=20, published=20, old=20)
    client.post(STREAM + "/consumers/fast/progress", json={"position": 18})
    client.post(STREAM + "/consumers/slow/progress", json={"position": 5})
    taken = lease(client, ttl=120)
    assert prune(clean_db, stream) == 0  # the lease is pinned at 0

    client.post(f"/v1/leases/{taken['lease_id']}/advance", json={"position": 15})
    assert prune(clean_db, stream) == 5  # now the slow consumer holds it

    state = client.get(STREAM).json()
    assert (state["committed_position"], state["published_position"]) == (20, 20)
    assert state["pruned_through"] == 5
    floor = state["floor"]
    assert floor["held_by"] == {"kind": "consumer", "name": "slow", "position": 5}
    assert floor["held_back"] == 15
    assert "'slow'" in floor["description"] and "15 published" in floor["description"]
    lags = {c["consumer_id"]: c["lag"] for c in state["consumers"]}
    assert lags == {"fast": 2, "slow": 15}
    (only,) = state["leases"]
    assert only["lease_id"] == taken["lease_id"] and only["pinned_position"] == 15
    assert 0 < only["seconds_to_expiry"] <= 120 and not only["expired"]

    error(client.get("/v1/streams/t1/nope/1"), 404, "STREAM_NOT_FOUND")


# Leases ---------------------------------------------------------------------------


def test_lease_lifecycle(client: TestClient, clean_db: DatabaseSettings) -> None:
    stream = ready_stream(clean_db, n=10, published=10, old=10)
    client.post(STREAM + "/consumers/app/progress", json={"position": 4})
    prune(clean_db, stream)

    taken = lease(client, ttl=30)
    assert taken["pinned_position"] == 4  # the pruned-through position
    assert (taken["holder"], taken["ttl_seconds"]) == ("rebuild-7", 30)
    lease_url = f"/v1/leases/{taken['lease_id']}"

    renewed = client.post(lease_url + "/renew", json={"ttl_seconds": 300})
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["expires_at"] > taken["expires_at"]
    assert client.post(lease_url + "/renew").json()["ttl_seconds"] == 300  # keeps the last TTL

    assert client.post(lease_url + "/advance", json={"position": 8}).json()["pinned_position"] == 8
    backwards = client.post(lease_url + "/advance", json={"position": 6})
    assert backwards.json()["pinned_position"] == 8
    error(
        client.post(lease_url + "/advance", json={"position": 11}), 409, "POSITION_BEYOND_COMMITTED"
    )

    assert client.delete(lease_url).status_code == 204
    assert client.delete(lease_url).status_code == 204  # idempotent
    error(client.post(lease_url + "/renew"), 410, "LEASE_RELEASED")
    error(client.post(lease_url + "/advance", json={"position": 9}), 410, "LEASE_RELEASED")


def test_lease_errors(client: TestClient, clean_db: DatabaseSettings) -> None:
    write_events(clean_db, "t1", "c1", 3)
    unknown = f"/v1/leases/{uuid.uuid4()}"
    error(client.post(unknown + "/renew"), 404, "LEASE_NOT_FOUND")
    error(client.post(unknown + "/advance", json={"position": 1}), 404, "LEASE_NOT_FOUND")
    error(client.delete(unknown), 404, "LEASE_NOT_FOUND")
    error(client.post("/v1/leases/not-a-uuid/renew"), 422, "VALIDATION_FAILED")

    body = {"tenant_id": "t1", "catalog_id": "c1", "history_epoch": 1, "holder": "h"}
    error(client.post("/v1/leases", json={**body, "ttl_seconds": 601}), 422, "TTL_TOO_LONG")
    error(client.post("/v1/leases", json={**body, "ttl_seconds": 0}), 422, "VALIDATION_FAILED")
    stale = {**body, "history_epoch": 2, "ttl_seconds": 60}
    error(client.post("/v1/leases", json=stale), 410, "EPOCH_NOT_CURRENT")
    taken = lease(client)
    error(
        client.post(f"/v1/leases/{taken['lease_id']}/renew", json={"ttl_seconds": 601}),
        422,
        "TTL_TOO_LONG",
    )


def test_an_expired_lease_cannot_be_renewed_advanced_or_read(
    client: TestClient, clean_db: DatabaseSettings
) -> None:
    write_events(clean_db, "t1", "c1", 5)
    taken = lease(client, ttl=1)
    time.sleep(1.2)  # expire it on the database clock, for real
    lease_url = f"/v1/leases/{taken['lease_id']}"
    error(client.post(lease_url + "/renew"), 410, "LEASE_EXPIRED")
    error(client.post(lease_url + "/advance", json={"position": 2}), 410, "LEASE_EXPIRED")
    params = {"lease_id": taken["lease_id"], "history_epoch": 1, "after": 0}
    error(client.get("/v1/exports/events", params=params), 410, "LEASE_EXPIRED")
    state = client.get(STREAM).json()
    assert state["leases"][0]["expired"] and state["floor"] is None
    assert client.delete(lease_url).status_code == 204


# Exports --------------------------------------------------------------------------


def test_exports_serve_events_after_the_cursor_under_a_live_lease(
    client: TestClient, clean_db: DatabaseSettings
) -> None:
    stream = ready_stream(clean_db, n=10, published=10, old=10)
    client.post(STREAM + "/consumers/app/progress", json={"position": 3})
    assert prune(clean_db, stream) == 3
    taken = lease(client)
    lease_id = taken["lease_id"]
    client.post(f"/v1/leases/{lease_id}/advance", json={"position": 6})  # the export's W

    page = client.get(
        "/v1/exports/events", params={"lease_id": lease_id, "history_epoch": 1, "after": 6}
    )
    assert page.status_code == 200, page.text
    assert [e["position"] for e in page.json()["events"]] == [7, 8, 9, 10]
    assert page.json()["committed_position"] == 10

    error(
        client.get(
            "/v1/exports/events", params={"lease_id": lease_id, "history_epoch": 1, "after": 2}
        ),
        410,
        "CURSOR_PRUNED",
    )
    error(
        client.get("/v1/exports/events", params={"lease_id": lease_id, "history_epoch": 2}),
        409,
        "LEASE_EPOCH_MISMATCH",
    )
    error(
        client.get(
            "/v1/exports/events", params={"lease_id": str(uuid.uuid4()), "history_epoch": 1}
        ),
        404,
        "LEASE_NOT_FOUND",
    )
    error(client.get("/v1/exports/events", params={"history_epoch": 1}), 422, "VALIDATION_FAILED")

    expire_lease(clean_db, lease_id)
    error(
        client.get(
            "/v1/exports/events", params={"lease_id": lease_id, "history_epoch": 1, "after": 6}
        ),
        410,
        "LEASE_EXPIRED",
    )


def test_exports_refuse_an_epoch_that_is_no_longer_current(
    client: TestClient, clean_db: DatabaseSettings
) -> None:
    write_events(clean_db, "t1", "c1", 4)
    taken = lease(client)
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE history_epoch SET epoch = 2 WHERE tenant_id = 't1' AND catalog_id = 'c1'"
        )
    params = {"lease_id": taken["lease_id"], "history_epoch": 1}
    error(client.get("/v1/exports/events", params=params), 410, "EPOCH_NOT_CURRENT")
    # Nor is the old epoch's lease kept alive or moved on; letting it go is allowed.
    lease_url = f"/v1/leases/{taken['lease_id']}"
    error(client.post(lease_url + "/renew"), 410, "EPOCH_NOT_CURRENT")
    error(client.post(lease_url + "/advance", json={"position": 2}), 410, "EPOCH_NOT_CURRENT")
    assert client.delete(lease_url).status_code == 204


# The API as a whole ---------------------------------------------------------------


def test_openapi_documents_every_endpoint_and_its_error_body(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    consumer = "/v1/streams/{tenant_id}/{catalog_id}/{history_epoch}/consumers/{consumer_id}"
    assert set(paths[consumer]) == {"put", "delete"}
    assert "post" in paths[consumer + "/progress"]
    assert "get" in paths["/v1/streams/{tenant_id}/{catalog_id}/{history_epoch}/events"]
    assert "get" in paths["/v1/streams/{tenant_id}/{catalog_id}/{history_epoch}"]
    assert "post" in paths["/v1/leases"]
    for action in ("renew", "advance"):
        assert "post" in paths["/v1/leases/{lease_id}/" + action]
    assert "delete" in paths["/v1/leases/{lease_id}"]
    exports = paths["/v1/exports/events"]["get"]
    gone = exports["responses"]["410"]["content"]["application/json"]["schema"]
    assert gone == {"$ref": "#/components/schemas/ErrorBody"}
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


def test_unknown_routes_and_methods_answer_in_the_error_format(client: TestClient) -> None:
    error(client.get("/v1/nothing-here"), 404, "NOT_FOUND")
    error(client.patch("/v1/leases"), 405, "METHOD_NOT_ALLOWED")


def test_health_and_metrics(client: TestClient, clean_db: DatabaseSettings) -> None:
    write_events(clean_db, "t1", "c1", 3)
    client.post(STREAM + "/consumers/app/progress", json={"position": 1})
    assert client.get("/healthz").status_code == 200
    metrics = client.get("/metrics").text
    assert "gapless_retention_report_up 1.0" in metrics
    labels = 'catalog="c1",consumer="app",epoch="1",tenant="t1"'
    assert f"gapless_retention_consumer_lag_positions{{{labels}}} 2.0" in metrics
    # The floor, and the consumer holding it (the lowest progress: 0 or app's 1).
    floor = re.search(
        r'gapless_retention_floor_position\{catalog="c1",epoch="1",holder="([^"]+)",'
        r'holder_kind="consumer",tenant="t1"\} ([0-9.]+)',
        metrics,
    )
    assert floor is not None, metrics
    assert float(floor.group(2)) <= 1.0


def test_numbers_beyond_64_bits_are_422_and_change_nothing(
    client: TestClient, clean_db: DatabaseSettings
) -> None:
    """Epochs and positions are PostgreSQL bigints: one that cannot be stored is the
    caller's error, refused before any I/O, never an empty answer or a 500."""
    write_events(clean_db, "t1", "c1", 3)
    huge = 2**63
    beyond = f"/v1/streams/t1/c1/{huge}"
    error(client.get(beyond), 422, "VALIDATION_FAILED")
    error(client.get(beyond + "/events"), 422, "VALIDATION_FAILED")
    error(client.put(beyond + "/consumers/app"), 422, "VALIDATION_FAILED")
    error(client.get(STREAM + "/events", params={"after": huge}), 422, "VALIDATION_FAILED")
    error(
        client.post(STREAM + "/consumers/app/progress", json={"position": huge}),
        422,
        "VALIDATION_FAILED",
    )
    body = {"tenant_id": "t1", "catalog_id": "c1", "holder": "r", "ttl_seconds": 60}
    error(client.post("/v1/leases", json={**body, "history_epoch": huge}), 422, "VALIDATION_FAILED")
    with psycopg.connect(clean_db.resolver_owner_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM stream_consumer").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM rebuild_lease").fetchone() == (0,)
    # The largest bigint itself is a number like any other.
    error(client.get(f"/v1/streams/t1/c1/{huge - 1}"), 404, "STREAM_NOT_FOUND")
