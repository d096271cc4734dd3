"""The tables that refresh themselves in place: the page loads the pinned htmx from
the console (allowed by its Content-Security-Policy) only when it was found verified,
each refreshing table asks for its own fragment with the page's filters, and a
refresh whose session has ended sends the whole page to the login form."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

from fastapi.testclient import TestClient

from db.settings import DatabaseSettings
from infra.console.app import create_app
from infra.console.assets import SCRIPT_PATH
from infra.local import console_assets
from tests.integration.infra.console.conftest import OPERATOR, console_settings, log_in

_HX_GET = re.compile(r'<div id="([\w-]+)" hx-get="([^"]+)" hx-trigger="every 5s"')


def test_the_pages_load_the_pinned_script_under_their_policy(
    clean_db: DatabaseSettings, topic: str
) -> None:
    directory = console_assets.default_directory()
    assert directory is not None
    console_assets.fetch(directory, print)  # what make console-assets does
    with TestClient(create_app(console_settings(topic))) as fresh:
        log_in(fresh, OPERATOR)
        page = fresh.get("/streams")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert f'<script src="{SCRIPT_PATH}" defer></script>' in page.text
        assert "<script>" not in page.text  # nothing inline
        script = fresh.get(SCRIPT_PATH)
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert "immutable" in script.headers["cache-control"]
        assert script.content == (directory / console_assets.SCRIPT).read_bytes()


def test_without_the_script_the_pages_are_whole_and_serve_none(
    clean_db: DatabaseSettings, topic: str, tmp_path: Path
) -> None:
    settings = console_settings(topic, console_assets_dir=tmp_path)  # nothing fetched there
    with TestClient(create_app(settings), follow_redirects=False) as client:
        log_in(client, OPERATOR)
        page = client.get("/streams")
        assert page.status_code == 200 and "<script" not in page.text
        assert 'id="streams-table"' in page.text
        assert client.get(SCRIPT_PATH).status_code == 404


def test_each_refreshing_table_asks_for_its_fragment_with_the_pages_query(
    console: TestClient,
) -> None:
    log_in(console, OPERATOR)
    overview = console.get("/streams?tenant=t1&limit=20&q=c")
    (region, url), *_ = _HX_GET.findall(overview.text)
    assert region == "streams-table"
    assert unescape(url) == "/streams/table?tenant=t1&q=c&limit=20"
    fragment = console.get(unescape(url))
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert _HX_GET.findall(fragment.text) == [(region, url)]  # it keeps refreshing

    rebuilds = console.get("/rebuilds")
    assert _HX_GET.findall(rebuilds.text) == [("rebuilds-live", "/rebuilds/live")]
    live = console.get("/rebuilds/live")
    assert live.status_code == 200 and "<html" not in live.text and "In flight" in live.text


def test_a_refresh_after_the_session_ended_sends_the_page_to_the_login(
    console: TestClient,
) -> None:
    answer = console.get(
        "/streams/table?tenant=t1",
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/streams?tenant=t1"},
    )
    assert answer.status_code == 401
    assert answer.headers["hx-redirect"] == "/login?next=%2Fstreams%3Ftenant%3Dt1"
    # A page asked for as a page is still redirected the ordinary way.
    assert console.get("/streams/table").status_code == 303
