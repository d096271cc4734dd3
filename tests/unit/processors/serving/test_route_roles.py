"""Every route of the read API declares the viewer role (``schemas.http.auth``),
except the probes, the metrics scrape and the OpenAPI document, which answer
without a token as on the resolver API."""

from __future__ import annotations

from pydantic import SecretStr

from processors.serving.app import create_app
from processors.settings import ReadApiSettings
from schemas.http.auth import Role, token_hash
from tests.fixtures.api_routes import declared_roles

CATALOG = "/v1/tenants/{tenant_id}/catalogs/{catalog_id}"
PUBLIC = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")}
EXPECTED = {
    ("GET", CATALOG + "/items"): Role.VIEWER,
    ("GET", CATALOG + "/items/{item_id}"): Role.VIEWER,
    ("GET", CATALOG + "/search"): Role.VIEWER,
    ("GET", CATALOG + "/shipping-policies"): Role.VIEWER,
}


def test_every_read_needs_the_viewer_role_and_only_the_probes_are_open() -> None:
    """Never started: the pool opens only in the app's lifespan."""
    app = create_app(ReadApiSettings(api_tokens=SecretStr(f"{token_hash('unused')}:*")))
    declared = declared_roles(app)
    assert {e for e, roles in declared.items() if not roles} == PUBLIC
    assert {e: roles for e, roles in declared.items() if roles} == {
        e: [r] for e, r in EXPECTED.items()
    }
