"""The reading pages: the overview pages through 1,000 streams by keyset, with its
filters and its table alone as a fragment; a stream's page decodes its recent
events; every page renders for a logged-in viewer."""

from __future__ import annotations

import re
from html import unescape

import psycopg
from fastapi.testclient import TestClient

from db.settings import DatabaseSettings
from tests.integration.infra.console.conftest import ADMIN, VIEWER, Quarantine, log_in
from tests.integration.producers.retention.streams import write_events

_STREAM = re.compile(r'href="/streams/([^/"]+)/([^/"]+)/(\d+)"')
_NEXT = re.compile(r'href="(/streams\?[^"]+)" rel="next"')


def _streams(db: DatabaseSettings, tenants: int, catalogs: int) -> list[str]:
    rows = [(f"t{t}", f"c{c:03d}", 1, c) for t in range(tenants) for c in range(catalogs)]
    with psycopg.connect(db.resolver_owner_dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO stream_cursor (tenant_id, catalog_id, history_epoch, position)"
            " VALUES (%s, %s, %s, %s)",
            rows,
        )
    return [f"{t}/{c}/{e}" for t, c, e, _ in rows]


def _listed(html: str) -> list[str]:
    return ["/".join(m) for m in _STREAM.findall(html)]


def test_the_overview_pages_through_1000_streams(
    console: TestClient, clean_db: DatabaseSettings
) -> None:
    every = _streams(clean_db, 10, 100)
    log_in(console, ADMIN)
    seen: list[str] = []
    url: str | None = "/streams?limit=100"
    pages = 0
    while url is not None:
        page = console.get(url)
        assert page.status_code == 200, page.text
        seen += _listed(page.text)
        pages += 1
        found = _NEXT.search(page.text)
        url = unescape(found[1]) if found else None
    assert pages == 10 and seen == sorted(every)

    table = console.get("/streams/table?limit=100&tenant=t3")
    assert table.status_code == 200 and "<html" not in table.text
    assert table.text.lstrip().startswith('<div id="streams-table" hx-get="/streams/table?')
    assert _listed(table.text) == [s for s in sorted(every) if s.startswith("t3/")]
    assert _NEXT.search(table.text) is None
    searched = _listed(console.get("/streams?q=C05&limit=500").text)
    assert searched == [s for s in sorted(every) if "/c05" in s]
    assert _listed(console.get("/streams?catalog=c007").text) == [f"t{t}/c007/1" for t in range(10)]


def test_a_streams_page_shows_its_positions_and_decodes_its_recent_events(
    console: TestClient, clean_db: DatabaseSettings
) -> None:
    stream = write_events(clean_db, "t1", "c1", 4)
    log_in(console, VIEWER)
    page = console.get(f"/streams/t1/c1/{stream.history_epoch}")
    assert page.status_code == 200, page.text
    text = unescape(page.text)
    assert "catalog_item.upserted" in text and "decision.recorded" in text
    assert "history_epoch=" in text and "t1/c1" in text
    assert console.get("/streams/t1/nope/1").headers["x-error-code"] == "STREAM_NOT_FOUND"
    assert console.get("/streams/t2/c1/1").headers["x-error-code"] == "TENANT_SCOPE_DENIED"


def test_every_page_renders_for_a_viewer(console: TestClient, quarantine: Quarantine) -> None:
    entry = quarantine.poison("t1", 1)
    log_in(console, VIEWER)
    for path in (
        "/streams",
        "/streams/table",
        "/rebuilds",
        "/pauses",
        "/quarantine",
        f"/quarantine/{entry.id}",
        "/quarantine/bulk-retry",
        "/parked",
        "/captures",
        "/audit",
    ):
        page = console.get(path)
        assert page.status_code == 200, (path, page.text)
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        assert page.headers["x-frame-options"] == "DENY"
    assert console.get("/healthz").status_code == 200
    assert console.get("/readyz").status_code == 200
    assert "gapless_console_requests_total" in console.get("/metrics").text
