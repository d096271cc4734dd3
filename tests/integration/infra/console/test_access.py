"""Who gets in and what they may do: the login with a token, the session cookie, CSRF
on every state-changing form, and roles and tenant scope checked on the server."""

from __future__ import annotations

import hashlib

import psycopg
from fastapi.testclient import TestClient

from db.settings import DatabaseSettings
from infra.console.app import create_app
from infra.console.auth import SESSION_COOKIE
from tests.integration.infra.console.conftest import (
    ADMIN,
    OPERATOR,
    OTHER,
    VIEWER,
    Quarantine,
    audit,
    console_settings,
    csrf,
    error_code,
    log_in,
)


def _cookie_attributes(set_cookie: str) -> dict[str, str]:
    name_value, *attributes = (part.strip() for part in set_cookie.split(";"))
    found = {"name": name_value.split("=", 1)[0]}
    for attribute in attributes:
        key, _, value = attribute.partition("=")
        found[key.lower()] = value
    return found


def test_login_sets_a_strict_httponly_session_cookie_and_logout_ends_it(
    console: TestClient, clean_db: DatabaseSettings
) -> None:
    assert console.get("/streams").headers["location"].startswith("/login?next=")
    answer = log_in(console, ADMIN, "alice")
    assert answer.status_code == 303 and answer.headers["location"] == "/streams"
    cookie = next(
        _cookie_attributes(c)
        for c in answer.headers.get_list("set-cookie")
        if c.startswith(SESSION_COOKIE + "=")
    )
    assert {"httponly", "path", "max-age"} <= cookie.keys()
    assert cookie["samesite"].lower() == "strict" and cookie["path"] == "/"
    assert "secure" not in cookie  # GAPLESS_CONSOLE_SECURE_COOKIE is off here
    session_id = console.cookies[SESSION_COOKIE]
    with psycopg.connect(clean_db.control_dsn) as conn:
        rows = conn.execute("SELECT session_hash, person, scope FROM console_session").fetchall()
    # Only the id's hash is stored, never the id nor the token.
    assert rows == [(hashlib.sha256(session_id.encode()).hexdigest(), "alice", "*=admin")]
    page = console.get("/streams")
    assert page.status_code == 200 and ADMIN not in page.text and session_id not in page.text

    assert console.post("/logout", data={"csrf": csrf(console)}).status_code == 303
    console.cookies.set(SESSION_COOKIE, session_id)  # the old cookie, kept by hand
    assert console.get("/streams").headers["location"].startswith("/login")
    assert error_code(console.post("/logout", data={"csrf": "x"})) == "SESSION_REQUIRED"
    assert [(a["action"], a["outcome"]) for a in audit(clean_db)] == [
        ("login", "done"),
        ("logout", "done"),
    ]


def test_the_cookie_is_secure_when_configured(clean_db: DatabaseSettings, topic: str) -> None:
    settings = console_settings(topic, console_secure_cookie=True)
    app = create_app(settings)
    with TestClient(app, base_url="https://testserver", follow_redirects=False) as client:
        answer = log_in(client, ADMIN)
    assert answer.status_code == 303, answer.text
    cookies = [_cookie_attributes(c) for c in answer.headers.get_list("set-cookie")]
    assert "secure" in next(c for c in cookies if c["name"] == SESSION_COOKIE)


def test_an_unknown_token_and_a_forged_login_are_refused(
    console: TestClient, clean_db: DatabaseSettings
) -> None:
    refused = log_in(console, "not-a-token", "mallory")
    assert refused.status_code == 401 and error_code(refused) == "LOGIN_REFUSED"
    assert "not-a-token" not in refused.text
    forged = console.post("/login", data={"token": ADMIN, "person": "m", "login_csrf": "x"})
    assert forged.status_code == 403 and error_code(forged) == "CSRF_TOKEN_INVALID"
    assert SESSION_COOKIE not in console.cookies
    [record] = audit(clean_db)
    assert (record["person"], record["outcome"], record["code"]) == (
        "mallory",
        "refused",
        "LOGIN_REFUSED",
    )


def test_a_viewer_sees_the_streams_and_is_refused_an_action(
    console: TestClient, clean_db: DatabaseSettings, quarantine: Quarantine
) -> None:
    entry = quarantine.poison("t1", 1)
    with psycopg.connect(clean_db.resolver_owner_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO stream_cursor (tenant_id, catalog_id, history_epoch, position)"
            " VALUES ('t1', 'c1', 1, 1), ('t2', 'c9', 1, 4)"
        )
    log_in(console, VIEWER, "victor")
    overview = console.get("/streams")
    assert overview.status_code == 200
    assert "t1/c1@1" in overview.text and "t2/c9@1" not in overview.text  # tenant scope
    assert '<a href="/quarantine?stream=t1/c1/1">1</a>' in overview.text  # quarantined count
    listed = console.get("/quarantine")
    assert f"#{entry.id}" in listed.text and f"/quarantine/{entry.id}/retry" not in listed.text

    refused = console.post(f"/quarantine/{entry.id}/retry", data={"csrf": csrf(console)})
    assert refused.status_code == 403 and error_code(refused) == "ROLE_DENIED"
    assert quarantine.entries()[entry.id].status == "open"
    assert audit(clean_db)[-1] | {"detail": ""} == {
        "person": "victor",
        "action": "quarantine.retry",
        "target": f"entry #{entry.id}",
        "tenant_id": "t1",
        "reason": "",
        "outcome": "refused",
        "code": "ROLE_DENIED",
        "detail": "",
    }


def test_an_operator_of_another_tenant_is_refused_by_scope(
    console: TestClient, quarantine: Quarantine
) -> None:
    entry = quarantine.poison("t1", 1)
    log_in(console, OTHER, "olga")
    assert f"#{entry.id}" not in console.get("/quarantine").text
    assert error_code(console.get(f"/quarantine/{entry.id}")) == "TENANT_SCOPE_DENIED"
    refused = console.post(
        f"/quarantine/{entry.id}/skip", data={"csrf": csrf(console), "reason": "not mine"}
    )
    assert refused.status_code == 403 and error_code(refused) == "TENANT_SCOPE_DENIED"
    assert quarantine.entries()[entry.id].status == "open"


def test_a_post_without_this_sessions_csrf_token_is_refused(
    console: TestClient, second: TestClient, clean_db: DatabaseSettings, quarantine: Quarantine
) -> None:
    entry = quarantine.poison("t1", 1)
    log_in(console, OPERATOR, "alice")
    log_in(second, OPERATOR, "alice")
    for data in (
        {"reason": "forged"},  # no token at all
        {"reason": "forged", "csrf": "0" * 64},  # a made-up one
        {"reason": "forged", "csrf": csrf(second)},  # another session's
    ):
        refused = console.post(f"/quarantine/{entry.id}/skip", data=data)
        assert refused.status_code == 403 and error_code(refused) == "CSRF_TOKEN_INVALID"
    assert quarantine.entries()[entry.id].status == "open"
    assert [a["code"] for a in audit(clean_db) if a["action"] == "quarantine.skip"] == [
        "CSRF_TOKEN_INVALID"
    ] * 3
