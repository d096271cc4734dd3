"""The read API serves exactly the stream's serving generation: the one the live
consumer's progress row names for the current history epoch, never a shadow's, and
never two in one response, also while the serving generation flips under it."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from db.settings import DatabaseSettings
from processors.serving.app import create_app
from processors.serving.snapshot import SnapshotReader
from tests.integration.processors.serving.conftest import (
    CATALOG,
    SHADOW,
    TENANT,
    Catalog,
    auth,
    error,
    ok,
    read_api_settings,
)

BASE = f"/v1/tenants/{TENANT}/catalogs/{CATALOG}"


def _two_generations(catalog: Catalog, items: int = 5) -> None:
    """Generation 1 and 2 of the same items, every title and value naming its
    generation; generation 2 has one item more."""
    catalog.epoch()
    for generation in (1, 2):
        catalog.apply(generation, catalog.definition("colour", "Colour"))
        for n in range(items + generation - 1):
            catalog.apply(
                generation,
                catalog.item(f"i{n}", f"boot g{generation}"),
                catalog.value(f"i{n}", "colour", f"red-g{generation}"),
            )


def test_the_live_consumers_generation_serves_and_a_flip_changes_it(
    catalog: Catalog, client: TestClient
) -> None:
    _two_generations(catalog)
    catalog.serve(1, position=7)
    catalog.serve(2, consumer=SHADOW, position=9)  # a shadow rebuild's own row

    page = ok(client.get(f"{BASE}/items", headers=auth()))
    assert page["served_from"] == {"history_epoch": 1, "generation": 1, "position": 7}
    assert [i["title"] for i in page["items"]] == ["boot g1"] * 5
    detail = ok(client.get(f"{BASE}/items/i0", headers=auth()))
    assert detail["served_from"]["generation"] == 1
    assert [v["value"] for v in detail["attribute_values"]] == ["red-g1"]
    assert error(client.get(f"{BASE}/items/i5", headers=auth()), 404) == "PRODUCT_ITEM_NOT_FOUND"
    found = ok(client.get(f"{BASE}/search", params={"q": "red-g2"}, headers=auth()))
    assert found["hits"] == []

    catalog.serve(2, position=11)  # the cutover

    page = ok(client.get(f"{BASE}/items", headers=auth()))
    assert page["served_from"] == {"history_epoch": 1, "generation": 2, "position": 11}
    assert [i["title"] for i in page["items"]] == ["boot g2"] * 6
    assert ok(client.get(f"{BASE}/items/i5", headers=auth()))["item"]["title"] == "boot g2"
    found = ok(client.get(f"{BASE}/search", params={"q": "red-g2"}, headers=auth()))
    assert len(found["hits"]) == 6
    assert found["served_from"]["generation"] == 2


def test_a_catalog_without_a_live_progress_row_is_not_served(
    catalog: Catalog, client: TestClient
) -> None:
    # No history epoch at all.
    assert error(client.get(f"{BASE}/items", headers=auth()), 404) == "CATALOG_NOT_SERVED"
    # An epoch, rows, and only a shadow's progress row: the live consumer applied nothing.
    _two_generations(catalog)
    catalog.serve(2, consumer=SHADOW)
    for path in ("/items", "/items/i0", "/shipping-policies", "/search?q=boot"):
        assert error(client.get(BASE + path, headers=auth()), 404) == "CATALOG_NOT_SERVED"


def test_a_progress_row_of_an_old_epoch_does_not_serve(
    catalog: Catalog, client: TestClient
) -> None:
    _two_generations(catalog)
    catalog.serve(1)
    with psycopg.connect(catalog.db.control_dsn, autocommit=True) as control:
        control.execute(
            "UPDATE history_epoch SET epoch = 2 WHERE tenant_id = %s AND catalog_id = %s",
            (TENANT, CATALOG),
        )
    settings = read_api_settings(catalog.db)
    with TestClient(create_app(settings)) as fresh:  # no epoch cached
        assert error(fresh.get(f"{BASE}/items", headers=auth()), 404) == "CATALOG_NOT_SERVED"


def test_every_read_is_one_repeatable_read_read_only_transaction(
    catalog: Catalog, client: TestClient
) -> None:
    _two_generations(catalog)
    catalog.serve(1)
    reader: SnapshotReader = client.app.state.reader  # type: ignore[attr-defined]

    def settings_of(conn: Any, _served: Any) -> tuple[Any, ...]:
        row = conn.execute(
            "SELECT current_setting('transaction_isolation'),"
            " current_setting('transaction_read_only'), txid_current_if_assigned() IS NULL,"
            " now() = statement_timestamp()"
        ).fetchone()
        assert row is not None
        return tuple(row)

    _served, found = reader.read(TENANT, CATALOG, settings_of)
    # now() is the transaction's start: unequal to this statement's own timestamp
    # proves the progress row and this statement ran in one transaction.
    assert found == ("repeatable read", "on", True, False)


def test_no_response_mixes_generations_while_the_serving_one_flips(
    catalog: Catalog, clean_db: DatabaseSettings
) -> None:
    """Readers read continuously while another connection flips the live row between
    generation 1 and 2: every read succeeds, and every row of a response is of the
    generation the response names."""
    _two_generations(catalog, items=30)
    catalog.serve(1)
    stop = threading.Event()
    flips = 0

    def flip() -> None:
        nonlocal flips
        while not stop.is_set():
            catalog.serve(2 if flips % 2 == 0 else 1)
            flips += 1

    failures: list[str] = []
    seen: set[int] = set()
    settings = read_api_settings(clean_db, read_api_pool_size=4)
    with TestClient(create_app(settings)) as reader:
        flipper = threading.Thread(target=flip)
        flipper.start()
        try:
            for n in range(150):
                path = ("/items?limit=200", "/items/i3", "/search?q=boot&limit=200")[n % 3]
                response = reader.get(BASE + path, headers=auth())
                if response.status_code != 200:
                    failures.append(response.text)
                    continue
                body = response.json()
                generation = body["served_from"]["generation"]
                seen.add(generation)
                if "item" in body:
                    texts = [body["item"]["title"], *(v["value"] for v in body["attribute_values"])]
                    expected = [f"boot g{generation}", f"red-g{generation}"]
                else:
                    texts = [r["title"] for r in body.get("items", body.get("hits", []))]
                    expected = [f"boot g{generation}"] * (29 + generation)
                if texts != expected:
                    failures.append(f"generation {generation} at {path}: {texts}")
        finally:
            stop.set()
            flipper.join()
    assert failures == []
    assert flips > 10
    assert seen == {1, 2}, "the flips did not interleave with the reads"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_operations_routes_answer_without_a_token(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 200
