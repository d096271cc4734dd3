"""The read API while its catalog is paused for a restore: ``STREAM_BEING_RESTORED``
(503, with ``Retry-After``) instead of data the restore is replacing; other catalogs
are served as ever, and after the resume the catalog is served again."""

from __future__ import annotations

import psycopg
from fastapi.testclient import TestClient

from db.control import pauses
from db.settings import DatabaseSettings
from tests.fixtures.waits import wait_for
from tests.integration.processors.serving.conftest import CATALOG, TENANT, Catalog, auth, ok

PATH = f"/v1/tenants/{TENANT}/catalogs/{CATALOG}/items"


def test_a_paused_catalog_is_answered_as_being_restored(
    clean_db: DatabaseSettings, catalog: Catalog, client: TestClient
) -> None:
    catalog.epoch()
    catalog.apply(1, catalog.item("i1", "lamp"))
    catalog.serve(1)
    other = Catalog(catalog.conn, clean_db, catalog="c2")
    other.epoch()
    other.apply(1, other.item("j1", "chair"))
    other.serve(1)
    assert [i["item_id"] for i in ok(client.get(PATH, headers=auth()))["items"]] == ["i1"]
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        pauses.open_pause(conn, TENANT, CATALOG, "ops", "restore drill")

    def restoring() -> bool:
        answer = client.get(PATH, headers=auth())
        return answer.status_code == 503 and answer.json()["code"] == "STREAM_BEING_RESTORED"

    wait_for(restoring, "the read API to hold the pause", 15)  # its poll: 2 s by default
    answer = client.get(PATH, headers=auth())
    assert answer.headers.get("Retry-After") == "5"
    assert "restore drill" in answer.json()["message"]
    ok(client.get(f"/v1/tenants/{TENANT}/catalogs/c2/items", headers=auth()))
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        pauses.resume(conn, TENANT, CATALOG, "ops")
    wait_for(lambda: client.get(PATH, headers=auth()).status_code == 200, "served again", 15)
