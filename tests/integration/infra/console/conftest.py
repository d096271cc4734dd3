"""A console over the real databases and Kafka (FastAPI's TestClient, its lifespan
run), people logged in with tokens of each role, and quarantine entries made the
way the applier makes them."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from infra.console.app import create_app
from infra.console.settings import ConsoleSettings
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.applier.repair import Entry, list_entries
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemUpserted, Envelope
from schemas.http.auth import token_hash

VIEWER = "viewer-of-t1"
OPERATOR = "operator-of-t1-t3"
OTHER = "operator-of-t2"
ADMIN = "admin-of-all"
TOKENS = ",".join(
    [
        f"{token_hash(VIEWER)}:t1=viewer",
        f"{token_hash(OPERATOR)}:t1=operator|t3=operator",
        f"{token_hash(OTHER)}:t2=operator",
        f"{token_hash(ADMIN)}:*=admin",
    ]
)

_CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
_LOGIN_CSRF = re.compile(r'name="login_csrf" value="([^"]+)"')
_offsets = iter(range(1_000_000))


def console_settings(control_topic: str, **overrides: Any) -> ConsoleSettings:
    """The console's settings: the test databases (from the environment the services
    fixture set), these tokens, and ``control_topic`` for its commands."""
    return ConsoleSettings(
        api_tokens=SecretStr(TOKENS),
        control_topic=control_topic,
        console_resume_wait_seconds=0,
        **overrides,
    )


@pytest.fixture()
def console(clean_db: DatabaseSettings, topic: str) -> Iterator[TestClient]:
    """A console whose control topic is a fresh topic of this test."""
    with TestClient(create_app(console_settings(topic)), follow_redirects=False) as client:
        yield client


@pytest.fixture()
def second(console: TestClient) -> Iterator[TestClient]:
    """Another browser on the same console (its own cookies)."""
    with TestClient(console.app, follow_redirects=False) as client:
        yield client


def log_in(client: TestClient, token: str, person: str = "alice") -> Any:
    """Log in through the form, as a browser does; the login's answer."""
    form = client.get("/login")
    assert form.status_code == 200, form.text
    login_csrf = _LOGIN_CSRF.search(form.text)
    assert login_csrf is not None
    return client.post(
        "/login",
        data={"token": token, "person": person, "login_csrf": login_csrf[1], "next": "/streams"},
    )


def csrf(client: TestClient, path: str = "/streams") -> str:
    """The session's CSRF token, as a page's forms carry it."""
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = _CSRF.search(page.text)
    assert found is not None, "no form with a CSRF token on " + path
    return found[1]


def error_code(response: Any) -> str:
    """The stable code of an error page (also in its ``X-Error-Code`` header)."""
    code = str(response.headers.get("x-error-code", ""))
    assert code and code in response.text, response.text
    return code


def _message(tenant: str, position: int, title: str = "lamp", catalog: str = "c1") -> RawMessage:
    event = Envelope(
        tenant_id=tenant,
        catalog_id=catalog,
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id=f"item{position}", revision=1),
        occurred_at=datetime.now(UTC),
        payload=CatalogItemUpserted(class_id="lamp", status="active", title=title),
    )
    return RawMessage(
        "events", 0, next(_offsets), CODEC.encode_key(event.key), CODEC.encode_value(event)
    )


class Quarantine:
    """Makes quarantine entries through the live applier: a poison event (a title
    PostgreSQL cannot store) or one whose catalog has no epoch yet."""

    def __init__(self, db: DatabaseSettings) -> None:
        self.db = db
        self.applier = Applier(db.product_dsn, EpochSource(db.control_dsn, ttl_seconds=0), CODEC)

    def epoch(self, tenant: str, catalog: str = "c1") -> None:
        with psycopg.connect(self.db.control_dsn, autocommit=True) as conn:
            ensure_epoch(conn, tenant, catalog)

    def poison(self, tenant: str, position: int, catalog: str = "c1") -> Entry:
        self.epoch(tenant, catalog)
        self.applier.apply([_message(tenant, position, "bad\x00title", catalog)])
        return self._newest()

    def without_epoch(self, tenant: str, position: int, catalog: str = "c1") -> Entry:
        self.applier.apply([_message(tenant, position, catalog=catalog)])
        return self._newest()

    def entries(self, status: str | None = None) -> dict[int, Entry]:
        with psycopg.connect(self.db.product_dsn) as conn:
            return {e.id: e for e in list_entries(conn, status)}

    def _newest(self) -> Entry:
        return self.entries()[max(self.entries())]


@pytest.fixture()
def quarantine(clean_db: DatabaseSettings) -> Iterator[Quarantine]:
    made = Quarantine(clean_db)
    yield made
    made.applier.close()


def audit(db: DatabaseSettings) -> list[dict[str, Any]]:
    """Every audit record, oldest first."""
    with psycopg.connect(db.control_dsn) as conn:
        cursor = conn.execute(
            "SELECT person, action, target, tenant_id, reason, outcome, code, detail"
            " FROM console_audit ORDER BY id"
        )
        names = [c.name for c in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
