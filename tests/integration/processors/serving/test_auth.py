"""Every read needs a token with the viewer role on the tenant in its path."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.integration.processors.serving.conftest import (
    ADMIN_T2,
    CATALOG,
    TENANT,
    Catalog,
    auth,
    error,
    ok,
)

PATHS = ("/items", "/items/i1", "/search?q=boot", "/shipping-policies")


@pytest.fixture()
def served(catalog: Catalog) -> Catalog:
    catalog.epoch()
    catalog.apply(1, catalog.item("i1", "boot"))
    catalog.serve(1)
    return catalog


@pytest.mark.parametrize("path", PATHS)
def test_the_auth_matrix(served: Catalog, client: TestClient, path: str) -> None:
    url = f"/v1/tenants/{TENANT}/catalogs/{CATALOG}{path}"
    assert error(client.get(url), 401) == "UNAUTHENTICATED"
    assert error(client.get(url, headers=auth("not-a-token")), 401) == "UNAUTHENTICATED"
    assert error(client.get(url, headers={"Authorization": "Basic x"}), 401) == "UNAUTHENTICATED"
    assert error(client.get(url, headers=auth(ADMIN_T2)), 403) == "TENANT_SCOPE_DENIED"
    assert ok(client.get(url, headers=auth()))["served_from"]["generation"] == 1


def test_a_tenant_the_token_may_not_read_is_refused_before_anything_is_read(
    client: TestClient,
) -> None:
    # t2 has no epoch and no rows: the 403 comes before any read would answer 404.
    url = f"/v1/tenants/t2/catalogs/{CATALOG}/items"
    assert error(client.get(url, headers=auth()), 403) == "TENANT_SCOPE_DENIED"
    assert error(client.get(url, headers=auth(ADMIN_T2)), 404) == "CATALOG_NOT_SERVED"


def test_the_openapi_document_lists_the_reads(client: TestClient) -> None:
    document = ok(client.get("/openapi.json"))
    assert document["info"]["title"] == "gapless product read API"
    base = "/v1/tenants/{tenant_id}/catalogs/{catalog_id}"
    assert {
        base + "/items",
        base + "/items/{item_id}",
        base + "/search",
        base + "/shipping-policies",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= set(document["paths"])


def test_metrics_count_requests_by_route_template(served: Catalog, client: TestClient) -> None:
    ok(client.get(f"/v1/tenants/{TENANT}/catalogs/{CATALOG}/items/i1", headers=auth()))
    client.get(f"/v1/tenants/{TENANT}/catalogs/{CATALOG}/items/i1")
    text = client.get("/metrics").text
    route = "/v1/tenants/{tenant_id}/catalogs/{catalog_id}/items/{item_id}"
    assert f'gapless_read_api_requests_total{{method="GET",route="{route}",status="200"}} 1.0' in (
        text
    )
    assert f'route="{route}",status="401"}} 1.0' in text
    assert "gapless_read_api_request_seconds_bucket" in text
