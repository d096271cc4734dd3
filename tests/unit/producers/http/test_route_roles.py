"""Every route of the resolver API declares the role it needs, in one place: a
``Viewer``, ``Operator`` or ``Admin`` dependency (``schemas.http.auth``). A new
route without one fails here, and so does a change of a route's role that this
table does not make too."""

from __future__ import annotations

from schemas.http.auth import Role
from tests.fixtures.api_routes import COLLECTOR_ONLY, PUBLIC, declared_roles, offline_app

VIEWER, OPERATOR, ADMIN = Role.VIEWER, Role.OPERATOR, Role.ADMIN
CATALOG = "/v1/tenants/{tenant_id}/catalogs/{catalog_id}"
GENERATION = CATALOG + "/identity-generations/{class_id}/{generation}"
STREAM = "/v1/streams/{tenant_id}/{catalog_id}/{history_epoch}"
CONSUMER = STREAM + "/consumers/{consumer_id}"

EXPECTED = {
    ("GET", CATALOG + "/review-cases"): VIEWER,
    ("GET", CATALOG + "/review-cases/{case_id}"): VIEWER,
    ("POST", CATALOG + "/review-cases/{case_id}/decisions"): OPERATOR,
    ("GET", CATALOG + "/items/{item_id}/decisions"): VIEWER,
    ("POST", CATALOG + "/items/{item_id}/split"): OPERATOR,
    ("POST", CATALOG + "/identity-generations"): OPERATOR,
    ("GET", CATALOG + "/identity-generations"): VIEWER,
    ("GET", GENERATION): VIEWER,
    ("POST", GENERATION + "/backfill"): OPERATOR,
    ("POST", GENERATION + "/collisions/{identity_hash}/resolution"): OPERATOR,
    ("POST", GENERATION + "/approval"): OPERATOR,
    ("GET", CATALOG + "/classes"): VIEWER,
    ("GET", CATALOG + "/attributes"): VIEWER,
    ("GET", CATALOG + "/attributes/{attribute_key}/versions/{version}"): VIEWER,
    ("GET", CATALOG + "/items/{item_id}/attributes"): VIEWER,
    ("PUT", CONSUMER): ADMIN,
    ("DELETE", CONSUMER): ADMIN,
    ("POST", CONSUMER + "/progress"): ADMIN,
    ("GET", STREAM + "/events"): VIEWER,
    ("GET", STREAM): VIEWER,
    ("POST", "/v1/leases"): ADMIN,
    ("POST", "/v1/leases/{lease_id}/renew"): ADMIN,
    ("POST", "/v1/leases/{lease_id}/advance"): ADMIN,
    ("DELETE", "/v1/leases/{lease_id}"): ADMIN,
    ("GET", "/v1/exports/events"): VIEWER,
    ("GET", "/v1/streams"): VIEWER,
    ("POST", "/v1/exports"): ADMIN,
    ("GET", "/v1/exports/{export_id}"): VIEWER,
    ("GET", "/v1/receipts/{receipt_id}"): VIEWER,
}


def test_every_route_declares_exactly_one_role_or_is_listed_as_public() -> None:
    declared = declared_roles(offline_app())
    unlisted = PUBLIC | COLLECTOR_ONLY
    assert unlisted <= set(declared), "a public or collector route is gone: update the lists"
    undeclared = sorted(e for e, roles in declared.items() if not roles and e not in unlisted)
    assert not undeclared, f"routes without a Viewer/Operator/Admin dependency: {undeclared}"
    several = sorted(e for e, roles in declared.items() if len(set(roles)) > 1)
    assert not several, f"routes declaring more than one role: {several}"
    listed_with_role = sorted(e for e in unlisted if declared[e])
    assert not listed_with_role, f"public or collector-only, yet a role: {listed_with_role}"


def test_each_route_needs_the_role_of_its_kind() -> None:
    """Reads and receipts: viewer; decisions (cases, splits, identity generations):
    operator; consumers, their progress and rebuild leases: admin."""
    declared = declared_roles(offline_app())
    roles = {e: r[0] for e, r in declared.items() if r}
    assert roles == EXPECTED
