"""Roles per tenant through the real HTTP API (uvicorn on a loopback port, real
PostgreSQL): every endpoint in the order a catalog's life reaches it, each first
tried by every token whose role is too low (403 ``ROLE_DENIED`` naming the role
needed, and nothing in the databases changes), then done by a token that holds the
role, so each refusal is of a request that would otherwise have succeeded.

Reads and receipts need viewer; decisions (review cases, splits, identity
generations) need operator; consumers, their progress and rebuild leases need admin.
Collectors, sources and quarantine or capture repairs have no HTTP endpoint (they are
``gapless`` commands against the databases), so they are not in this matrix.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from producers.resolver.review_cases import open_case
from schemas.codec import CODEC
from schemas.http.auth import Role, token_hash
from tests.fixtures.api_routes import declared_roles, offline_app
from tests.fixtures.resolver_api import free_port, serving
from tests.integration.producers.resolver.conftest import UowFactory, add_item
from tests.integration.producers.resolver.identity.conftest import add, h

VIEWER, OPERATOR, ADMIN = "viewer-of-t1", "operator-of-t1", "admin-of-t1"
SPLIT_TOKEN = "viewer-of-t1-admin-of-t2"
"""Admin somewhere, viewer on t1: its role on the tenant acted on is what counts."""
TOKENS = {VIEWER: Role.VIEWER, OPERATOR: Role.OPERATOR, ADMIN: Role.ADMIN}
API_TOKENS = ",".join(
    [
        f"{token_hash(VIEWER)}:t1=viewer",
        f"{token_hash(OPERATOR)}:t1=operator",
        f"{token_hash(ADMIN)}:t1=admin",
        f"{token_hash(SPLIT_TOKEN)}:t1=viewer|t2=admin",
    ]
)

CATALOG = "/v1/tenants/t1/catalogs/c1"
GENERATIONS = CATALOG + "/identity-generations"
STREAM = "/v1/streams/t1/c1/1"
EVIDENCE = [{"capture_id": "cap-1", "locator": "$.offers[0]"}]
BASIS = {"actor": "reviewer:ana", "rationale": "checked against the capture", "evidence": EVIDENCE}

# What a refused request must leave as it was: every table an endpoint here writes.
TABLES = (
    "review_case",
    "decision",
    "catalog_item",
    "listing_mapping",
    "item_split",
    "identity_generation",
    "identity_key",
    "identity_collision",
    "stream_consumer",
    "rebuild_lease",
    "snapshot_export",
    "outbox",
)


@dataclass
class Scenario:
    """What earlier steps learned that later ones address."""

    lease_id: str = ""
    export_id: str = ""
    generation_revision: int = 0
    seen: set[tuple[str, str]] = field(default_factory=set)


Text = str | Callable[[Scenario], str]
Body = dict[str, Any] | Callable[[Scenario], dict[str, Any]] | None


@dataclass(frozen=True)
class Step:
    method: str
    template: str  # the route's path template, as the app declares it
    path: Text
    needs: Role
    expect: int
    by: str  # the token that then does it
    body: Body = None
    then: Callable[[Scenario, httpx.Response], None] = lambda _s, _r: None


def _lease(s: Scenario) -> str:
    return f"/v1/leases/{s.lease_id}"


def _keep_lease(s: Scenario, r: httpx.Response) -> None:
    s.lease_id = r.json()["lease_id"]


def _wait_for_export(s: Scenario, r: httpx.Response) -> None:
    """Keep the export's id and wait until its background writer is done, so the
    rows it changes (its own, the lease's pin) are still when later steps compare."""
    s.export_id = r.json()["export_id"]
    url = r.request.url.copy_with(path=f"/v1/exports/{s.export_id}", query=None)
    deadline = time.monotonic() + 60
    auth = {"Authorization": r.request.headers["Authorization"]}
    while httpx.get(url, headers=auth).json()["status"] == "writing":
        assert time.monotonic() < deadline, "the export never finished"


def _keep_revision(s: Scenario, r: httpx.Response) -> None:
    s.generation_revision = r.json()["revision"]


C = "/v1/tenants/{tenant_id}/catalogs/{catalog_id}"
GEN = C + "/identity-generations/{class_id}/{generation}"
S = "/v1/streams/{tenant_id}/{catalog_id}/{history_epoch}"
CONSUMER = S + "/consumers/{consumer_id}"
COLLISION = f"{GENERATIONS}/shoe/1/collisions/{h('ACME', 'X-1')}/resolution"

STEPS = [
    Step("GET", C + "/review-cases", CATALOG + "/review-cases", Role.VIEWER, 200, VIEWER),
    Step(
        "GET",
        C + "/review-cases/{case_id}",
        CATALOG + "/review-cases/case-1",
        Role.VIEWER,
        200,
        VIEWER,
    ),
    Step(
        "POST",
        C + "/review-cases/{case_id}/decisions",
        CATALOG + "/review-cases/case-1/decisions",
        Role.OPERATOR,
        201,
        OPERATOR,
        {
            **BASIS,
            "expected_revision": 1,
            "action": "accept",
            "facts": [{"kind": "map_listing", "listing_id": "L1", "item_id": "i1"}],
        },
    ),
    Step(
        "GET",
        C + "/items/{item_id}/decisions",
        CATALOG + "/items/i1/decisions",
        Role.VIEWER,
        200,
        VIEWER,
    ),
    Step(
        "POST",
        C + "/items/{item_id}/split",
        CATALOG + "/items/i1/split",
        Role.OPERATOR,
        201,
        ADMIN,
        {
            **BASIS,
            "successors": [
                {"item_id": "i1-red", "title": "red"},
                {"item_id": "i1-blue", "title": "blue"},
            ],
            "remaps": {"L1": "i1-red"},
        },
    ),
    Step(
        "POST",
        C + "/identity-generations",
        GENERATIONS,
        Role.OPERATOR,
        201,
        OPERATOR,
        {"class_id": "shoe", "rule_fields": ["brand", "mpn"]},
    ),
    Step("GET", C + "/identity-generations", GENERATIONS, Role.VIEWER, 200, VIEWER),
    Step("GET", GEN, GENERATIONS + "/shoe/1", Role.VIEWER, 200, VIEWER),
    Step("POST", GEN + "/backfill", GENERATIONS + "/shoe/1/backfill", Role.OPERATOR, 200, ADMIN),
    Step(
        "POST",
        GEN + "/collisions/{identity_hash}/resolution",
        COLLISION,
        Role.OPERATOR,
        201,
        OPERATOR,
        {**BASIS, "holder_item_id": "a"},
    ),
    Step("GET", GEN, GENERATIONS + "/shoe/1", Role.VIEWER, 200, VIEWER, then=_keep_revision),
    Step(
        "POST",
        GEN + "/approval",
        GENERATIONS + "/shoe/1/approval",
        Role.OPERATOR,
        201,
        ADMIN,
        lambda s: {**BASIS, "expected_revision": s.generation_revision},
    ),
    Step("GET", C + "/classes", CATALOG + "/classes", Role.VIEWER, 200, VIEWER),
    Step("GET", C + "/attributes", CATALOG + "/attributes", Role.VIEWER, 200, VIEWER),
    Step(
        "GET",
        C + "/attributes/{attribute_key}/versions/{version}",
        CATALOG + "/attributes/colour/versions/1",
        Role.VIEWER,
        404,
        VIEWER,
    ),
    Step(
        "GET",
        C + "/items/{item_id}/attributes",
        CATALOG + "/items/a/attributes",
        Role.VIEWER,
        200,
        VIEWER,
    ),
    Step("PUT", CONSUMER, STREAM + "/consumers/shop-feed", Role.ADMIN, 200, ADMIN),
    Step(
        "POST",
        CONSUMER + "/progress",
        STREAM + "/consumers/shop-feed/progress",
        Role.ADMIN,
        200,
        ADMIN,
        {"position": 1},
    ),
    Step("GET", S + "/events", STREAM + "/events", Role.VIEWER, 200, VIEWER),
    Step("GET", S, STREAM, Role.VIEWER, 200, VIEWER),
    Step(
        "POST",
        "/v1/leases",
        "/v1/leases",
        Role.ADMIN,
        201,
        ADMIN,
        {
            "tenant_id": "t1",
            "catalog_id": "c1",
            "history_epoch": 1,
            "holder": "rebuild",
            "ttl_seconds": 60,
        },
        then=_keep_lease,
    ),
    Step(
        "POST",
        "/v1/leases/{lease_id}/renew",
        lambda s: _lease(s) + "/renew",
        Role.ADMIN,
        200,
        ADMIN,
    ),
    Step(
        "POST",
        "/v1/leases/{lease_id}/advance",
        lambda s: _lease(s) + "/advance",
        Role.ADMIN,
        200,
        ADMIN,
        {"position": 1},
    ),
    Step(
        "POST",
        "/v1/exports",
        "/v1/exports",
        Role.ADMIN,
        202,
        ADMIN,
        lambda s: {"lease_id": s.lease_id},
        then=_wait_for_export,
    ),
    Step(
        "GET",
        "/v1/exports/{export_id}",
        lambda s: f"/v1/exports/{s.export_id}",
        Role.VIEWER,
        200,
        VIEWER,
    ),
    Step("GET", "/v1/streams", "/v1/streams", Role.VIEWER, 200, VIEWER),
    Step(
        "GET",
        "/v1/exports/events",
        lambda s: f"/v1/exports/events?lease_id={s.lease_id}&history_epoch=1",
        Role.VIEWER,
        200,
        VIEWER,
    ),
    Step("DELETE", "/v1/leases/{lease_id}", _lease, Role.ADMIN, 204, ADMIN),
    Step("DELETE", CONSUMER, STREAM + "/consumers/shop-feed", Role.ADMIN, 204, ADMIN),
    Step(
        "GET", "/v1/receipts/{receipt_id}", f"/v1/receipts/{uuid.uuid4()}", Role.VIEWER, 404, VIEWER
    ),
]


@pytest.fixture()
def uow(clean_db: DatabaseSettings) -> Iterator[UowFactory]:
    """Units of Work as the services open them, to set the scene."""
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    yield lambda: UnitOfWork(pool, epochs, CODEC)
    epochs.close()
    pool.close()


@pytest.fixture()
def api(clean_db: DatabaseSettings) -> Iterator[httpx.Client]:
    with (
        serving(clean_db, free_port(), API_TOKENS) as running,
        httpx.Client(base_url=running.url, timeout=10) as client,
    ):
        yield client


def _fingerprint(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables a write here could touch."""
    with psycopg.connect(dsn) as conn:
        return {
            table: sorted(
                (tuple(str(v) for v in row) for row in conn.execute(f"SELECT * FROM {table}")),
            )
            for table in TABLES
        }


def _resolve(value: Any, scenario: Scenario) -> Any:
    return value(scenario) if callable(value) else value


def _call(api: httpx.Client, token: str, step: Step, scenario: Scenario) -> httpx.Response:
    return api.request(
        step.method,
        _resolve(step.path, scenario),
        json=_resolve(step.body, scenario),
        headers={"Authorization": f"Bearer {token}"},
    )


def _refused(response: httpx.Response, needs: Role) -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["code"] == "ROLE_DENIED", body
    assert f"the {needs.label} role" in body["message"], body


def test_every_endpoint_refuses_a_lower_role_and_serves_the_role_it_needs(
    api: httpx.Client, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1")
    add(uow, "a", brand="ACME", mpn="X-1")
    add(uow, "b", brand="acme", mpn="x-1")  # the same identity: a collision to resolve
    with uow() as u:
        open_case(u, "t1", "c1", "case-1", "listing", "L1")
        u.commit()
    scenario = Scenario()
    for step in STEPS:
        where = f"{step.method} {step.template}"
        lower = [t for t, role in TOKENS.items() if role < step.needs]
        if step.needs > Role.VIEWER:
            lower.append(SPLIT_TOKEN)
        before = _fingerprint(clean_db.resolver_owner_dsn)
        for token in lower:
            _refused(_call(api, token, step, scenario), step.needs)
        assert _fingerprint(clean_db.resolver_owner_dsn) == before, (
            f"{where}: a refusal changed rows"
        )
        allowed = [t for t, role in TOKENS.items() if role >= step.needs]
        if step.needs == Role.VIEWER:
            allowed.append(SPLIT_TOKEN)
            readers = allowed  # reads change nothing: every allowed token reads
        else:
            readers = [step.by]
        assert step.by in allowed, where
        for token in readers:
            response = _call(api, token, step, scenario)
            assert response.status_code == step.expect, (where, token, response.text)
        step.then(scenario, response)
        scenario.seen.add((step.method, step.template))

    with_roles = {e for e, roles in declared_roles(offline_app()).items() if roles}
    assert with_roles == scenario.seen, "an endpoint is missing from the matrix"


def test_a_role_on_one_tenant_is_not_a_role_on_another(api: httpx.Client, uow: UowFactory) -> None:
    """Admin on t2, viewer on t1: refused where the tenant comes from the body or a
    lease (after the body is read), not only where the path names it."""
    add_item(uow, "i1")
    lease = {
        "tenant_id": "t1",
        "catalog_id": "c1",
        "history_epoch": 1,
        "holder": "rebuild",
        "ttl_seconds": 60,
    }
    admin = {"Authorization": f"Bearer {ADMIN}"}
    split = {"Authorization": f"Bearer {SPLIT_TOKEN}"}
    _refused(api.post("/v1/leases", json=lease, headers=split), Role.ADMIN)
    taken = api.post("/v1/leases", json=lease, headers=admin)
    assert taken.status_code == 201, taken.text
    lease_id = taken.json()["lease_id"]
    _refused(api.post(f"/v1/leases/{lease_id}/renew", headers=split), Role.ADMIN)
    _refused(api.delete(f"/v1/leases/{lease_id}", headers=split), Role.ADMIN)
    other = api.put("/v1/streams/t1/c1/1/consumers/shop-feed", headers=split)
    _refused(other, Role.ADMIN)
    scope = api.put("/v1/streams/t3/c1/1/consumers/shop-feed", headers=split)
    assert (scope.status_code, scope.json()["code"]) == (403, "TENANT_SCOPE_DENIED")
