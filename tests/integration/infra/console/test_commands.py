"""Commands the console publishes on the control topic, exactly as the CLI does:
a rebuild request, its cancel, and the resume of a paused catalog (admins only)."""

from __future__ import annotations

import uuid
from urllib.parse import parse_qs, urlsplit

import psycopg
from fastapi.testclient import TestClient

from db.control import pauses
from db.product import rebuilds
from db.settings import DatabaseSettings
from schemas import control
from schemas.ids import StreamId
from schemas.settings import KafkaSettings
from tests.fixtures.kafka_reading import topic_values
from tests.integration.infra.console.conftest import (
    ADMIN,
    OPERATOR,
    VIEWER,
    audit,
    csrf,
    error_code,
    log_in,
)


def test_a_rebuild_request_reaches_the_control_topic(
    console: TestClient, clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    log_in(console, VIEWER, "victor")
    form = {"tenant": "t1", "catalog": "c1", "reason": "projection bug fixed"}
    refused = console.post("/rebuilds", data={"csrf": csrf(console), **form})
    assert (refused.status_code, error_code(refused)) == (403, "ROLE_DENIED")
    assert topic_values(kafka_settings, topic) == []

    log_in(console, OPERATOR, "alice")
    empty = console.post("/rebuilds", data={"csrf": csrf(console), **form, "reason": ""})
    assert error_code(empty) == "FORM_REASON_EMPTY"
    asked = console.post("/rebuilds", data={"csrf": csrf(console), **form})
    assert asked.status_code == 303
    requested = parse_qs(urlsplit(asked.headers["location"]).query)["requested"][0]

    [command] = [control.decode(v) for v in topic_values(kafka_settings, topic)]
    assert command.kind == "rebuild" and str(command.command_id) == requested
    assert (command.tenant_id, command.catalog_id, command.consumer) == (
        "t1",
        "c1",
        "product-applier",
    )
    assert (command.requested_by, command.reason) == ("alice (console)", "projection bug fixed")
    page = console.get(asked.headers["location"])
    assert requested in page.text and "control topic" in page.text
    assert audit(clean_db)[-1]["target"] == f"rebuild {requested} of t1/c1 (product-applier)"


def test_a_rebuild_is_cancelled_through_the_control_topic(
    console: TestClient, clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    rebuild_id = uuid.uuid4()
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        rebuilds.insert(
            conn,
            rebuild_id,
            "product-applier",
            StreamId("t1", "c1", 1),
            "product-applier-rebuild",
            "bob",
            "test",
        )
    log_in(console, OPERATOR)
    page = console.get("/rebuilds")
    assert str(rebuild_id) in page.text and f"/rebuilds/{rebuild_id}/cancel" in page.text
    cancelled = console.post(
        f"/rebuilds/{rebuild_id}/cancel", data={"csrf": csrf(console), "reason": "wrong catalog"}
    )
    assert cancelled.status_code == 303
    [command] = [control.decode(v) for v in topic_values(kafka_settings, topic)]
    assert (command.kind, command.rebuild_id, command.reason) == (
        "cancel",
        rebuild_id,
        "wrong catalog",
    )
    unknown = console.post(
        f"/rebuilds/{uuid.uuid4()}/cancel", data={"csrf": csrf(console), "reason": "x"}
    )
    assert (unknown.status_code, error_code(unknown)) == (404, "REBUILD_NOT_FOUND")


def test_only_an_admin_resumes_a_pause(
    console: TestClient, clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        pause, _ = pauses.open_pause(conn, "t1", "c1", "ops", "restore drill")
    log_in(console, OPERATOR)
    page = console.get("/pauses")
    assert "restore drill" in page.text and "/pauses/resume" not in page.text
    form = {"csrf": csrf(console), "tenant": "t1", "catalog": "c1", "reason": "restored"}
    refused = console.post("/pauses/resume", data=form)
    assert (refused.status_code, error_code(refused)) == (403, "ROLE_DENIED")

    log_in(console, ADMIN, "ada")
    resumed = console.post("/pauses/resume", data={**form, "csrf": csrf(console)})
    assert resumed.status_code == 303, resumed.text
    with psycopg.connect(clean_db.control_dsn) as conn:
        assert pauses.open_pause_of(conn, "t1", "c1") is None
    [command] = [control.decode(v) for v in topic_values(kafka_settings, topic)]
    assert (command.kind, command.command_id) == ("resume", pause.pause_id)
    again = console.post("/pauses/resume", data={**form, "csrf": csrf(console)})
    assert (again.status_code, error_code(again)) == (409, "FORM_STALE")
