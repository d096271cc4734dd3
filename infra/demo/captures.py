"""The demo's collectors: product feeds posted over HTTP and turned into decisions by
the capture worker, so ``gapless demo`` runs the intake path end to end.

For each tenant of the run, on its first catalog:
1. register a collector credential (client id → tenant, source, instance) and bind
   the source to the catalog with the ``json-feed`` adapter;
2. create an identity generation per feed class (rule: GTIN), backfill it and approve
   its activation through the operator API, as a reviewer would;
3. post feeds through ``POST /v1/captures`` with a collector token and an idempotency
   key each: later feeds repeat products with changed offers or attributes, some
   products are identical to what an earlier feed said (``unchanged``), and one post
   is sent twice (the second answer is the same receipt).
The resolver-worker process turns the captures into rule decisions; ``wait_settled``
waits until every job of the run is terminal.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg

from db.settings import DatabaseSettings

Echo = Callable[[str], None]

SOURCE = "demo-shop"
INSTANCE = "collector-1"
ADAPTER = "json-feed"
RULE = ("gtin",)
CATEGORIES = ("Home > Lighting > Desk Lamps", "Kitchen > Kettles", "Outdoor > Tents")
TERMINAL_JOB_STATES = ("done", "failed", "skipped")
IDENTITY_REVIEWER = "reviewer:demo-identity"


Send = Callable[[httpx.Client, str, dict[str, Any], dict[str, str]], httpx.Response]
"""Makes one POST: (client, path, JSON body, headers) → the answer."""


def _post_once(
    http: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    return http.post(path, json=body, headers=headers)


@dataclass
class CaptureStats:
    posted: int = 0
    repeated_posts: int = 0
    products_posted: int = 0
    receipts: set[str] = field(default_factory=set)


def gtin13(n: int) -> str:
    """A valid GTIN-13 (GS1 check digit) for ``n``: the identity rule refuses bad ones."""
    body = f"400{n:09d}"
    total = sum(int(d) * (3 if i % 2 else 1) for i, d in enumerate(body))
    return body + str((10 - total % 10) % 10)


def client_id(tenant_id: str) -> str:
    return f"{tenant_id}-collector"


def register_collectors(settings: DatabaseSettings, tenants: list[tuple[str, str]]) -> None:
    """Step 1 for every (tenant, catalog): the credential and the source binding."""
    from db.unit_of_work import Transaction
    from producers.capture.adapters import ADAPTERS
    from producers.capture.intake import collectors
    from producers.capture.worker import sources

    with psycopg.connect(settings.resolver_dsn) as conn:
        for tenant_id, catalog_id in tenants:
            collectors.register(conn, client_id(tenant_id), tenant_id, SOURCE, INSTANCE)
            with conn.transaction():
                sources.register(
                    Transaction(conn), tenant_id, SOURCE, catalog_id, ADAPTER, "demo", ADAPTERS
                )


def activate_identity(api: httpx.Client, tenants: list[tuple[str, str]]) -> int:
    """Step 2: one GTIN generation per class, created, backfilled and approved."""
    approved = 0
    for tenant_id, catalog_id in tenants:
        base = f"/v1/tenants/{tenant_id}/catalogs/{catalog_id}/identity-generations"
        for category in CATEGORIES:
            class_id = category.lower().replace(" > ", "/").replace(" ", "-")
            created = _ok(api.post(base, json={"class_id": class_id, "rule_fields": list(RULE)}))
            generation = created["generation"]
            approval = {
                "actor": IDENTITY_REVIEWER,
                "rationale": "GTINs identify this class; the backfill found no collisions",
                "evidence": [{"capture_id": "demo:identity-review", "locator": class_id}],
                "expected_revision": generation["revision"],
            }
            _ok(api.post(f"{base}/{class_id}/{generation['generation']}/approval", json=approval))
            approved += 1
    return approved


def post_feeds(
    api_url: str,
    token_for: Callable[[str], str],
    tenants: list[tuple[str, str]],
    feeds: int,
    products: int,
    echo: Echo,
    after_tenant: Callable[[int], None] = lambda index: None,
    send: Send | None = None,
) -> CaptureStats:
    """Step 3: ``feeds`` captures per tenant of ``products`` products or more each
    (later feeds add products); ``after_tenant`` runs after each tenant's posts.
    ``send`` makes each post (default: once, ``httpx.Client.post``); a caller riding
    out faults passes one that retries, which the idempotency key makes safe."""
    stats = CaptureStats()
    post = send or _post_once
    with httpx.Client(base_url=api_url, timeout=30.0) as http:
        for index, (tenant_id, _catalog) in enumerate(tenants):
            headers = {"Authorization": f"Bearer {token_for(client_id(tenant_id))}"}
            for feed in range(feeds):
                body = _capture(_feed(feed, products))
                key = f"{tenant_id}-feed-{feed}"
                receipt = _ok(post(http, "/v1/captures", body, _with(headers, key)))
                stats.posted += 1
                stats.products_posted += products
                stats.receipts.add(receipt["receipt_id"])
                if feed == 0:
                    # A collector retrying after a lost answer gets the same receipt.
                    again = _ok(post(http, "/v1/captures", body, _with(headers, key)))
                    if again["receipt_id"] != receipt["receipt_id"]:
                        raise RuntimeError("a repeated post got a second receipt")
                    stats.repeated_posts += 1
            echo(f"  posted {feeds} feeds for {tenant_id}")
            after_tenant(index)
    return stats


def wait_settled(settings: DatabaseSettings, run_id: str, expected: int, timeout: float) -> bool:
    """Until all ``expected`` capture jobs of the run are terminal (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job_counts(settings, run_id).get("settled", 0) >= expected:
            return True
        time.sleep(0.5)
    return False


def job_counts(settings: DatabaseSettings, run_id: str) -> dict[str, int]:
    """The run's capture jobs by status, and how many are terminal (``settled``)."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT status, count(*) FROM intake_job WHERE tenant_id LIKE %s GROUP BY status",
            (f"{run_id}-%",),
        ).fetchall()
    counts = {status: int(n) for status, n in rows}
    counts["settled"] = sum(counts.get(s, 0) for s in TERMINAL_JOB_STATES)
    return counts


def product_outcomes(settings: DatabaseSettings, run_id: str) -> dict[str, int]:
    """The run's products by outcome (applied, unchanged, review, …)."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT outcome, count(*) FROM capture_item WHERE tenant_id LIKE %s GROUP BY outcome",
            (f"{run_id}-%",),
        ).fetchall()
    return {outcome: int(n) for outcome, n in rows}


def capture_path_events(settings: DatabaseSettings, run_id: str) -> int:
    """Events this path committed (the identity approvals and the worker's decisions):
    one per aggregate revision each decision changed, its own included."""
    from producers.capture.worker.resolution import ACTOR

    with psycopg.connect(settings.resolver_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM decision_effect e JOIN decision d USING"
            " (tenant_id, catalog_id, decision_id)"
            " WHERE e.tenant_id LIKE %s AND e.role = 'changed' AND d.actor IN (%s, %s)",
            (f"{run_id}-%", ACTOR, IDENTITY_REVIEWER),
        ).fetchone()
    return int(row[0]) if row else 0


def _feed(feed: int, products: int) -> dict[str, Any]:
    """Feed ``feed`` of a shop: product n keeps its id, GTIN and class in every feed;
    its offer price moves every other feed (listing data: the item stays unchanged)
    and every fifth product changes colour then (a new item revision), and each feed
    adds products the earlier ones did not have."""
    items = []
    for n in range(products + feed * (products // 4)):
        category = CATEGORIES[n % len(CATEGORIES)]
        items.append(
            {
                "id": f"p{n}",
                "sku": f"SKU-{n:05d}",
                "title": f"{category.rsplit(' > ', 1)[-1][:-1]} no. {n}",
                "category": category,
                "brand": "Gapless Goods",
                "gtin": gtin13(n),
                "mpn": f"GG-{n:05d}",
                "attributes": {"color": _colour(n, feed), "weight_grams": 100 + n},
                "offer": {
                    "price": {"amount": f"{10 + n + (feed // 2)}.00", "currency": "EUR"},
                    "availability": "in_stock",
                },
            }
        )
    return {"version": 3, "currency": "EUR", "products": items}


def _colour(n: int, feed: int) -> str:
    shift = feed // 2 if n % 5 == 0 else 0
    return ("red", "blue", "green")[(n + shift) % 3]


def _capture(feed: dict[str, Any]) -> dict[str, Any]:
    artifact = json.dumps(feed, separators=(",", ":")).encode()
    return {
        "schema_version": 1,
        "source_url": "https://shop.example/feed.json",
        "captured_at": datetime.now(UTC).isoformat(),
        "content_type": "application/json",
        "artifact": base64.b64encode(artifact).decode(),
    }


def _with(headers: dict[str, str], key: str) -> dict[str, str]:
    return {**headers, "Idempotency-Key": key}


def _ok(response: httpx.Response) -> Any:
    if response.status_code >= 300:
        raise RuntimeError(
            f"{response.request.method} {response.request.url.path} answered"
            f" {response.status_code}: {response.text[:500]}"
        )
    return response.json()
