"""The operations console in a real browser: headless Chromium (Debian's packages,
driven by Selenium) against ``gapless console`` running as its own process beside
the resolver API, the relay and the agents, on the real databases and Kafka, with a
catalog written through the one write path and applied by the agents.

- a viewer logs in and sees their tenant's streams, whose table refreshes itself in
  place (new events show without a reload); an action they post anyway is refused
  with ``ROLE_DENIED`` on the page and changes nothing;
- an operator starts a rebuild from the rebuilds page and watches its phase move to
  ``done`` in that page, never reloaded;
- an operator retries one quarantined event and skips another with a reason, and
  the audit page shows both;
- an operator asks for a bulk retry, sees its dry run (nothing done yet) and
  confirms it;
- a forged form (the CSRF field removed, or a form injected into the page) is
  refused with ``CSRF_TOKEN_INVALID`` and changes nothing;
- every page renders with no Content-Security-Policy refusal and is photographed
  into ``.local/screenshots/``; the overview's picture becomes ``docs/console.png``
  (the README's) when ``GAPLESS_TEST_CONSOLE_PICTURE`` is ``1``.

Waiting is reading the page's DOM until it shows what is awaited, never a fixed
sleep. The processes start once for the module, on databases emptied first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg_pool import ConnectionPool
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from db.control.epochs import EpochSource
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.demo.workload import run_workload
from infra.local import console_assets
from infra.processes import Deployed, free_port
from schemas.settings import KafkaSettings
from tests.fixtures.browser import (
    click_through,
    csp_refusals,
    element_replaced,
    log_in,
    mark_document,
    mark_element,
    path_of,
    same_document,
    shoot,
    text,
    wait_until,
)
from tests.fixtures.services import empty_databases
from tests.fixtures.waits import wait_for
from tests.integration.infra.console.conftest import OPERATOR, TOKENS, VIEWER, Quarantine, audit

ROOT = Path(__file__).resolve().parents[2]
PICTURE = ROOT / "docs" / "console.png"
LAMPS, SHOES, GARDEN, TOOLS = ("t1", "lamps"), ("t1", "shoes"), ("t3", "garden"), ("t2", "tools")
STREAMS = [LAMPS, SHOES, GARDEN, TOOLS]


@dataclass
class Deployment:
    """What the tests reach: the console's address, the databases, a writer of
    decisions, a maker of quarantine entries, the processes (their logs on failure)."""

    url: str
    db: DatabaseSettings
    pool: ConnectionPool
    epochs: EpochSource
    quarantine: Quarantine
    processes: dict[str, Deployed]

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.processes.values())


@contextlib.contextmanager
def _topics(kafka: KafkaSettings) -> Iterator[dict[str, str]]:
    """An events, a control and a status topic of this module's own (an agent of a
    new group reads the control topic from its start, and must meet no other test's
    requests)."""
    run = uuid.uuid4().hex[:12]
    made = {
        "events": f"test.events.{run}",
        "control": f"test.control.{run}",
        "status": f"test.rebuild-status.{run}",
    }
    admin = AdminClient({"bootstrap.servers": kafka.kafka_bootstrap})
    new = [NewTopic(t, 3 if k == "events" else 1, 1) for k, t in made.items()]
    for future in admin.create_topics(new).values():
        future.result(timeout=30)
    try:
        yield made
    finally:
        for future in admin.delete_topics(list(made.values())).values():
            future.result(timeout=30)


def _processes(topics: dict[str, str], assets: Path, logs: Path) -> dict[str, Deployed]:
    """The resolver API, the relay and the agents as the rebuild tests run them, and
    the console with the tests' tokens (viewer of t1, operator of t1 and t3 …)."""
    api, relay, agents, console = free_port(), free_port(), free_port(), free_port()
    env = dict(
        os.environ,
        GAPLESS_EVENTS_TOPIC=topics["events"],
        GAPLESS_CONTROL_TOPIC=topics["control"],
        GAPLESS_REBUILD_STATUS_TOPIC=topics["status"],
        GAPLESS_RESOLVER_API_PORT=str(api),
        GAPLESS_RESOLVER_URL=f"http://127.0.0.1:{api}",
    )

    def process(name: str, port: int, **extra: str) -> Deployed:
        health = f"http://127.0.0.1:{port}/readyz"
        return Deployed(name, [name], {**env, **extra}, logs / f"{name}.log", health)

    return {
        "resolver-api": process("resolver-api", api),
        "relay": process("relay", relay, GAPLESS_RELAY_HTTP_PORT=str(relay)),
        "agents": process(
            "agents",
            agents,
            GAPLESS_AGENTS_WEB_PORT=str(agents),
            GAPLESS_AGENTS_APP_ID=f"console-e2e-{uuid.uuid4().hex[:8]}",
            GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS="1",
            GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS="0.5",
        ),
        "console": process(
            "console",
            console,
            GAPLESS_API_TOKENS=TOKENS,
            GAPLESS_CONSOLE_PORT=str(console),
            GAPLESS_CONSOLE_ASSETS_DIR=str(assets),
        ),
    }


def _caught_up(db: DatabaseSettings) -> bool:
    """Every stream's live progress is at its committed cursor."""
    key = "tenant_id || '/' || catalog_id"
    with psycopg.connect(db.resolver_dsn) as conn:
        committed = dict(conn.execute(f"SELECT {key}, position FROM stream_cursor").fetchall())
    with psycopg.connect(db.product_dsn) as conn:
        applied = dict(
            conn.execute(
                f"SELECT {key}, position FROM stream_progress WHERE consumer = 'product-applier'"
            ).fetchall()
        )
    return bool(committed) and all(applied.get(s) == p for s, p in committed.items())


@pytest.fixture(scope="module")
def deployment(
    db_settings: DatabaseSettings,
    kafka_settings: KafkaSettings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """The processes running on emptied databases, four catalogs written and applied."""
    empty_databases(db_settings)
    directory = console_assets.default_directory()
    assert directory is not None, "no local state directory for the console's htmx"
    assets = console_assets.fetch(directory, print).parent
    logs = tmp_path_factory.mktemp("console-e2e")
    with contextlib.ExitStack() as stack:
        processes = _processes(stack.enter_context(_topics(kafka_settings)), assets, logs)
        pool = ConnectionPool(db_settings.resolver_dsn, min_size=1, max_size=2, open=True)
        stack.callback(pool.close)
        epochs = EpochSource(db_settings.control_dsn)
        stack.callback(epochs.close)
        quarantine = Quarantine(db_settings)
        stack.callback(quarantine.applier.close)
        for p in processes.values():
            stack.callback(p.stop)  # in reverse: the console first, the API last
            p.start()
        here = Deployment(
            f"http://127.0.0.1:{processes['console'].env['GAPLESS_CONSOLE_PORT']}",
            db_settings,
            pool,
            epochs,
            quarantine,
            processes,
        )
        run_workload(pool, epochs, STREAMS, 400, 2)
        wait_for(lambda: all(p.health() == 200 for p in processes.values()), "every process", 120)
        wait_for(lambda: _caught_up(db_settings), "the agents to apply every event", 90)
        yield here


def _status(here: Deployment, entry_id: int) -> str:
    return here.quarantine.entries()[entry_id].status


def _refusal(driver: WebDriver) -> tuple[str, str]:
    """The error page's status and stable code, as it shows them."""
    codes = driver.find_elements(By.CSS_SELECTOR, "h1 code")
    assert codes, f"no refusal at {driver.current_url}: {text(driver, 'main')[:300]!r}"
    return text(driver, "h1").split()[0], codes[0].text


def _outcome(driver: WebDriver) -> str:
    """The outcome line of the action that redirected here."""
    return text(driver, "p.outcome")


def _inject_form(driver: WebDriver, action: str, fields: dict[str, str]) -> WebElement:
    """A form posting ``fields`` to ``action``, added to the page as a script of another
    origin or a tampered page could; its submit button."""
    driver.execute_script(
        """const form = document.createElement('form');
        form.method = 'post';
        form.action = arguments[0];
        for (const [name, value] of Object.entries(arguments[1])) {
          const input = document.createElement('input');
          input.type = 'hidden'; input.name = name; input.value = value;
          form.appendChild(input);
        }
        const button = document.createElement('button');
        button.id = 'injected'; button.type = 'submit'; button.textContent = 'injected';
        form.appendChild(button);
        document.querySelector('main').appendChild(form);""",
        action,
        fields,
    )
    return driver.find_element(By.ID, "injected")


def _csrf(driver: WebDriver) -> str:
    """The session's CSRF token, as the page's forms carry it (the logout form's)."""
    return str(driver.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value"))


def test_a_viewer_sees_the_streams_refresh_in_place_and_is_refused_an_action(
    deployment: Deployment, browser: WebDriver
) -> None:
    here = deployment
    entry = here.quarantine.poison("t1", 1, "q-viewer")
    log_in(browser, here.url, VIEWER, "vera")

    rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-stream]")
    shown = {row.get_attribute("data-stream") for row in rows}
    assert shown == {"t1/lamps/1", "t1/shoes/1"}  # their tenant's streams, no other
    assert browser.execute_script("return typeof window.htmx") == "object"
    shoot(browser, "overview-viewer")

    committed = 'tr[data-stream="t1/lamps/1"] td:nth-child(2)'
    before = int(text(browser, committed))
    mark_document(browser)
    run_workload(here.pool, here.epochs, [LAMPS], 30, 1, id_tag="more")
    wait_until(browser, lambda d: int(text(d, committed)) > before, "the new events", 30)
    assert same_document(browser), "the overview was reloaded, not refreshed in place"

    browser.get(f"{here.url}/quarantine/{entry.id}")
    assert "Repair" not in text(browser, "main")  # the page offers them no action
    # Posted anyway, with their own session and CSRF token: the server refuses it.
    form = {"csrf": _csrf(browser), "reason": "a viewer tries"}
    click_through(browser, _inject_form(browser, f"/quarantine/{entry.id}/skip", form))
    assert _refusal(browser) == ("403", "ROLE_DENIED")
    assert "Nothing was changed." in text(browser, "main")
    shoot(browser, "refused-role")
    assert _status(here, entry.id) == "open"
    last = audit(here.db)[-1]
    assert (last["person"], last["action"], last["outcome"], last["code"]) == (
        "vera",
        "quarantine.skip",
        "refused",
        "ROLE_DENIED",
    )
    assert csp_refusals(browser) == []


def test_an_operator_starts_a_rebuild_and_watches_it_reach_done(
    deployment: Deployment, browser: WebDriver
) -> None:
    here = deployment
    log_in(browser, here.url, OPERATOR, "olga")
    browser.get(f"{here.url}/rebuilds")
    form = browser.find_element(By.CSS_SELECTOR, "form[action='/rebuilds']")
    form.find_element(By.NAME, "tenant").send_keys(GARDEN[0])
    form.find_element(By.NAME, "catalog").send_keys(GARDEN[1])
    form.find_element(By.NAME, "reason").send_keys("rebuilt from the console")
    click_through(browser, form.find_element(By.TAG_NAME, "button"))
    assert path_of(browser) == "/rebuilds"
    assert "rebuild.start" in _outcome(browser) and "done" in _outcome(browser)
    rebuild_id = uuid.UUID(text(browser, "#requested code"))

    mark_document(browser)
    mark_element(browser, "#requested")

    def finished(driver: WebDriver) -> bool:
        shown = text(driver, "#requested")
        phase = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#requested .phase")]
        assert phase not in (["failed"], ["cancelled"]), (shown, here.logs())
        assert "not started" not in shown, (shown, here.logs())
        # Done, in a status line the page's refresh put there (however fast the
        # rebuild, and however late this thread reads: a swap always follows).
        return phase == ["done"] and element_replaced(driver, "#requested")

    wait_until(browser, finished, f"rebuild {rebuild_id} to show done", 120)
    assert same_document(browser), "the rebuilds page was reloaded, not refreshed in place"
    assert text(browser, f"#rebuild-{rebuild_id} .phase") == "done"
    shoot(browser, "rebuilds")
    with psycopg.connect(here.db.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
    assert row is not None and row.phase == "done", row
    assert (row.requested_by, row.reason) == ("olga (console)", "rebuilt from the console")
    assert csp_refusals(browser) == []


def test_an_operator_retries_one_entry_and_skips_another_and_the_audit_shows_both(
    deployment: Deployment, browser: WebDriver
) -> None:
    here = deployment
    early = here.quarantine.without_epoch("t3", 1, "q-retry")  # its catalog has no epoch
    poison = here.quarantine.poison("t1", 1, "q-skip")
    here.quarantine.epoch("t3", "q-retry")  # what made it fail is fixed
    log_in(browser, here.url, OPERATOR, "olga")

    browser.get(f"{here.url}/quarantine/{early.id}")
    assert "EPOCH_UNKNOWN" in text(browser, "code.code")
    retry = browser.find_element(By.CSS_SELECTOR, f"form[action='/quarantine/{early.id}/retry']")
    click_through(browser, retry.find_element(By.TAG_NAME, "button"))
    assert "applied, marked retried" in _outcome(browser)

    browser.get(f"{here.url}/quarantine/{poison.id}")
    assert "catalog_item.upserted" in text(browser, "main")  # opened decoded
    shoot(browser, "quarantine-entry")
    skip = browser.find_element(By.CSS_SELECTOR, f"form[action='/quarantine/{poison.id}/skip']")
    skip.find_element(By.NAME, "reason").send_keys("title cannot be stored")
    click_through(browser, skip.find_element(By.TAG_NAME, "button"))
    assert "skipped" in _outcome(browser)

    entries = here.quarantine.entries()
    assert entries[early.id].status == "retried"
    assert entries[poison.id].status == "skipped"
    assert entries[poison.id].resolution == "skipped by olga (console): title cannot be stored"

    browser.get(f"{here.url}/audit")
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "table.audit tbody tr")]
    retried = [r for r in rows if "quarantine.retry" in r and f"entry #{early.id}" in r]
    skipped = [r for r in rows if "quarantine.skip" in r and f"entry #{poison.id}" in r]
    assert len(retried) == 1 and "olga" in retried[0] and "done" in retried[0], rows
    assert len(skipped) == 1 and "title cannot be stored" in skipped[0], rows
    shoot(browser, "audit")
    assert csp_refusals(browser) == []


def test_an_operator_sees_a_bulk_retrys_dry_run_and_confirms_it(
    deployment: Deployment, browser: WebDriver
) -> None:
    here = deployment
    waiting = [here.quarantine.without_epoch("t3", p, "q-bulk") for p in (1, 2, 3)]
    here.quarantine.epoch("t3", "q-bulk")
    log_in(browser, here.url, OPERATOR, "olga")

    browser.get(f"{here.url}/quarantine?stream=t3/q-bulk/1")
    shoot(browser, "quarantine")
    click_through(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "Bulk retry"))
    assert path_of(browser) == "/quarantine/bulk-retry"
    assert "Nothing has been done yet" in text(browser, "main")
    listed = {a.text for a in browser.find_elements(By.CSS_SELECTOR, "main table td:first-child a")}
    assert listed == {f"#{e.id}" for e in waiting}
    shoot(browser, "bulk-retry-dry-run")
    assert {_status(here, e.id) for e in waiting} == {"open"}  # the dry run did nothing

    confirm = browser.find_element(By.CSS_SELECTOR, "form[action='/quarantine/bulk-retry'] button")
    assert confirm.text == "Confirm: retry these 3"
    click_through(browser, confirm)
    assert "3 applied and marked retried" in _outcome(browser)
    assert {_status(here, e.id) for e in waiting} == {"retried"}
    assert csp_refusals(browser) == []


def test_a_forged_form_is_refused_and_changes_nothing(
    deployment: Deployment, browser: WebDriver
) -> None:
    here = deployment
    entry = here.quarantine.poison("t1", 1, "q-forged")
    log_in(browser, here.url, OPERATOR, "olga")

    # The page's own form, its CSRF field taken out before it is sent.
    browser.get(f"{here.url}/quarantine/{entry.id}")
    skip = browser.find_element(By.CSS_SELECTOR, f"form[action='/quarantine/{entry.id}/skip']")
    browser.execute_script("arguments[0].querySelector('input[name=csrf]').remove()", skip)
    skip.find_element(By.NAME, "reason").send_keys("forged")
    click_through(browser, skip.find_element(By.TAG_NAME, "button"))
    assert _refusal(browser) == ("403", "CSRF_TOKEN_INVALID")
    shoot(browser, "refused-csrf")

    # A form injected into the page, without the token (the session's cookie goes along).
    browser.get(f"{here.url}/streams")
    click_through(browser, _inject_form(browser, f"/quarantine/{entry.id}/retry", {}))
    assert _refusal(browser) == ("403", "CSRF_TOKEN_INVALID")

    assert _status(here, entry.id) == "open"
    refused = [a for a in audit(here.db) if a["target"] == f"entry #{entry.id}"]
    assert [(a["action"], a["outcome"], a["code"]) for a in refused] == [
        ("quarantine.skip", "refused", "CSRF_TOKEN_INVALID"),
        ("quarantine.retry", "refused", "CSRF_TOKEN_INVALID"),
    ]


PAGES = {
    "overview": "/streams",
    "stream": "/streams/t1/lamps/1",
    "pauses": "/pauses",
    "parked": "/parked",
    "captures": "/captures",
}


def test_every_page_renders_under_its_policy_and_is_photographed(
    deployment: Deployment, browser: WebDriver
) -> None:
    here = deployment
    browser.get(f"{here.url}/login")
    shoot(browser, "login")
    log_in(browser, here.url, OPERATOR, "olga")
    for name, path in PAGES.items():
        browser.get(f"{here.url}{path}")
        assert text(browser, "h1"), name
        assert browser.execute_script("return typeof window.htmx") == "object", name
        assert csp_refusals(browser) == [], name
        shot = shoot(browser, name)
    browser.get(f"{here.url}/streams")
    rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-stream]")
    assert {r.get_attribute("data-stream") for r in rows} == {
        "t1/lamps/1",
        "t1/shoes/1",
        "t3/garden/1",
    }
    shot = shoot(browser, "overview")
    assert shot.stat().st_size > 10_000
    if os.environ.get("GAPLESS_TEST_CONSOLE_PICTURE") == "1":
        shutil.copyfile(shot, PICTURE)  # the README's picture
