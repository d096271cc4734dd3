"""Repairs through the console: retry and skip of quarantine entries (the audit shows
each), a bulk retry that runs only on the confirm of its dry run, bad input refused
with its code and nothing changed, parked events and capture failures."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from fastapi.testclient import TestClient

from db.control.console import record_action
from db.settings import DatabaseSettings
from infra.console.pages import quarantine as quarantine_page
from processors.applier.messages import RawMessage
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemUpserted, Envelope
from tests.integration.infra.console.conftest import (
    OPERATOR,
    Quarantine,
    audit,
    csrf,
    error_code,
    log_in,
)


def test_an_operator_retries_one_entry_and_skips_another_and_the_audit_shows_both(
    console: TestClient, clean_db: DatabaseSettings, quarantine: Quarantine
) -> None:
    early = quarantine.without_epoch("t3", 1)  # t3 has no epoch yet
    poison = quarantine.poison("t1", 1)
    assert early.error_code == "EPOCH_UNKNOWN"
    log_in(console, OPERATOR, "alice")

    opened = console.get(f"/quarantine/{poison.id}")
    assert opened.status_code == 200
    for shown in ("APPLY_FAILED", "catalog_item.upserted", "event_id=", "history_epoch=", "t1/c1"):
        assert shown in opened.text, shown

    quarantine.epoch("t3")  # what made it fail is fixed
    token = csrf(console)
    retried = console.post(f"/quarantine/{early.id}/retry", data={"csrf": token})
    assert retried.status_code == 303 and "audit=" in retried.headers["location"]
    assert "applied, marked retried" in console.get(retried.headers["location"]).text
    skipped = console.post(
        f"/quarantine/{poison.id}/skip", data={"csrf": token, "reason": "title unfixable"}
    )
    assert skipped.status_code == 303

    entries = quarantine.entries()
    assert entries[early.id].status == "retried"
    assert entries[early.id].resolution == "retried by alice (console)"
    assert entries[poison.id].status == "skipped"
    assert entries[poison.id].resolution == "skipped by alice (console): title unfixable"
    done = [(a["action"], a["target"], a["reason"], a["outcome"]) for a in audit(clean_db)[1:]]
    assert done == [
        ("quarantine.retry", f"entry #{early.id}", "", "done"),
        ("quarantine.skip", f"entry #{poison.id}", "title unfixable", "done"),
    ]
    page = console.get("/audit").text
    assert "quarantine.retry" in page and "title unfixable" in page and "alice" in page


def test_bad_input_is_refused_with_its_code_and_changes_nothing(
    console: TestClient, quarantine: Quarantine
) -> None:
    entry = quarantine.poison("t1", 1)
    log_in(console, OPERATOR)
    token = csrf(console)
    cases = [
        (f"/quarantine/{entry.id}/skip", {"reason": "   "}, 422, "FORM_REASON_EMPTY"),
        (f"/quarantine/{entry.id}/skip", {"reason": "x" * 501}, 422, "FORM_REASON_TOO_LONG"),
        ("/quarantine/999999/skip", {"reason": "gone"}, 404, "QUARANTINE_ENTRY_NOT_FOUND"),
        ("/quarantine/abc/retry", {}, 422, "FORM_INVALID"),
        ("/parked/not-a-uuid/retry", {}, 422, "FORM_INVALID"),
        ("/captures/skip", {"target": "12345", "reason": "gone"}, 404, "PRODUCT_NOT_FOUND"),
    ]
    for path, data, status, code in cases:
        answer = console.post(path, data={"csrf": token, **data})
        assert (answer.status_code, error_code(answer)) == (status, code), path
    assert quarantine.entries()[entry.id].status == "open"
    # An entry already repaired: the form that offered it is stale.
    assert console.post(f"/quarantine/{entry.id}/skip", data={"csrf": token, "reason": "ok"})
    again = console.post(f"/quarantine/{entry.id}/skip", data={"csrf": token, "reason": "ok"})
    assert (again.status_code, error_code(again)) == (409, "QUARANTINE_ENTRY_NOT_OPEN")


def _ids(html: str) -> str:
    found = re.search(r'name="ids" value="([0-9,]*)"', html)
    assert found is not None, html
    return found[1]


def test_a_bulk_retry_shows_its_dry_run_and_runs_only_on_confirm(
    console: TestClient, clean_db: DatabaseSettings, quarantine: Quarantine
) -> None:
    waiting = [quarantine.without_epoch("t3", p) for p in (1, 2, 3)]
    other = quarantine.poison("t1", 1)  # another code: not taken
    quarantine.epoch("t3")
    log_in(console, OPERATOR)

    dry_run = console.get("/quarantine/bulk-retry", params={"code": "EPOCH_UNKNOWN"})
    assert dry_run.status_code == 200 and "Nothing has been done yet" in dry_run.text
    ids = _ids(dry_run.text)
    assert sorted(map(int, ids.split(","))) == sorted(e.id for e in waiting)
    assert {e.status for e in quarantine.entries().values()} == {"open"}  # the dry run did nothing

    form = {"csrf": csrf(console), "ids": ids, "status": "open", "code": "EPOCH_UNKNOWN"}
    confirmed = console.post("/quarantine/bulk-retry", data=form)
    assert confirmed.status_code == 303
    entries = quarantine.entries()
    assert [entries[e.id].status for e in waiting] == ["retried"] * 3
    assert entries[other.id].status == "open"
    record = audit(clean_db)[-1]
    assert (record["action"], record["outcome"], record["tenant_id"]) == (
        "quarantine.bulk-retry",
        "done",
        "t3",
    )
    assert record["detail"].startswith("3 applied and marked retried")


def test_a_bulk_confirm_whose_dry_run_is_stale_does_nothing(
    console: TestClient, quarantine: Quarantine
) -> None:
    first = quarantine.without_epoch("t3", 1)
    log_in(console, OPERATOR)
    ids = _ids(console.get("/quarantine/bulk-retry", params={"code": "EPOCH_UNKNOWN"}).text)
    assert ids == str(first.id)
    later = quarantine.without_epoch("t3", 2)  # arrives after the dry run was shown
    quarantine.epoch("t3")
    form = {"csrf": csrf(console), "ids": ids, "status": "open", "code": "EPOCH_UNKNOWN"}
    stale = console.post("/quarantine/bulk-retry", data=form)
    assert (stale.status_code, error_code(stale)) == (409, "FORM_STALE")
    entries = quarantine.entries()
    assert entries[first.id].status == entries[later.id].status == "open"
    empty = console.post("/quarantine/bulk-retry", data={**form, "ids": ""})
    assert error_code(empty) == "FORM_STALE"


def test_quarantine_filters_by_code_stream_and_age(
    console: TestClient, quarantine: Quarantine
) -> None:
    early = quarantine.without_epoch("t3", 1)
    poison = quarantine.poison("t1", 1)
    log_in(console, OPERATOR)

    def shown(**params: str) -> set[int]:
        page = console.get("/quarantine", params=params)
        assert page.status_code == 200, page.text
        return {int(i) for i in re.findall(r'href="/quarantine/(\d+)"', page.text)}

    assert shown() == {early.id, poison.id}
    assert shown(code="EPOCH_UNKNOWN") == {early.id}
    assert shown(stream="t1/c1/1") == {poison.id}
    assert shown(age="1d") == set()
    assert shown(status="skipped") == set()
    assert error_code(console.get("/quarantine", params={"age": "soon"})) == "FORM_INVALID"


def test_an_action_is_recorded_started_before_its_module_acts(
    console: TestClient,
    clean_db: DatabaseSettings,
    quarantine: Quarantine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the module acts, the action's record already exists, ``started``: a
    console that dies at that moment leaves it so, never missing (the audit page says
    what ``started`` means); the outcome then completes that same record."""
    poison = quarantine.poison("t1", 1)
    log_in(console, OPERATOR, "alice")
    seen: list[dict[str, object]] = []

    def acts(*_args: object, **_kwargs: object) -> bool:
        seen.append(audit(clean_db)[-1])
        return False  # still failing, left open

    monkeypatch.setattr(quarantine_page, "retry", acts)
    retried = console.post(f"/quarantine/{poison.id}/retry", data={"csrf": csrf(console)})
    assert retried.status_code == 303
    [during] = seen
    assert (during["person"], during["action"], during["target"], during["outcome"]) == (
        "alice",
        "quarantine.retry",
        f"entry #{poison.id}",
        "started",
    )
    after = audit(clean_db)
    assert len(after) == len(seen) + 1 and after[-1]["outcome"] == "done"  # login, then it
    assert after[-1]["detail"] == "still failing, left open"

    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        record_action(
            conn,
            person="alice",
            token_id="t",
            action="quarantine.skip",
            target=f"entry #{poison.id}",
            tenant_id="t1",
            reason="",
            outcome="started",
        )
    assert "the console stopped before it knew" in console.get("/audit").text


def test_a_parked_event_opens_decoded_with_what_it_waits_on(
    console: TestClient, quarantine: Quarantine
) -> None:
    quarantine.epoch("t1")
    event = Envelope(
        tenant_id="t1",
        catalog_id="c1",
        history_epoch=1,
        position=1,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id="child", revision=1),
        dependencies=(AggregateRef(type="catalog_item", id="parent", revision=1),),
        occurred_at=datetime.now(UTC),
        payload=CatalogItemUpserted(class_id="lamp", status="active", title="lamp shade"),
    )
    raw = RawMessage("events", 0, 7, CODEC.encode_key(event.key), CODEC.encode_value(event))
    assert quarantine.applier.apply([raw]).parked == 1
    log_in(console, OPERATOR, "alice")

    assert f'href="/parked/{event.event_id}"' in console.get("/parked").text
    opened = console.get(f"/parked/{event.event_id}")
    assert opened.status_code == 200
    for shown in (
        "catalog_item.upserted",
        "lamp shade",
        "catalog_item parent@1 (never applied)",
        f"event_id={event.event_id}",
        "t1/c1",
        "events partition 0 offset 7",
        f'action="/parked/{event.event_id}/skip"',
    ):
        assert shown in opened.text, shown

    gone = console.get(f"/parked/{uuid.uuid4()}")
    assert gone.status_code == 404 and error_code(gone) == "PARKED_EVENT_NOT_FOUND"


def _park(quarantine: Quarantine, position: int, waits_on: str) -> Envelope:
    """An event of t1/c1 parked on an item that was never applied."""
    event = Envelope(
        tenant_id="t1",
        catalog_id="c1",
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id=f"child{position}", revision=1),
        dependencies=(AggregateRef(type="catalog_item", id=waits_on, revision=1),),
        occurred_at=datetime.now(UTC),
        payload=CatalogItemUpserted(class_id="lamp", status="active", title=f"lamp {position}"),
    )
    raw = RawMessage(
        "events", 0, 100 + position, CODEC.encode_key(event.key), CODEC.encode_value(event)
    )
    assert quarantine.applier.apply([raw]).parked == 1
    return event


def test_a_parked_bulk_retry_shows_its_dry_run_and_runs_only_on_its_confirm(
    console: TestClient, clean_db: DatabaseSettings, quarantine: Quarantine
) -> None:
    quarantine.epoch("t1")
    first, second = _park(quarantine, 1, "parent"), _park(quarantine, 2, "parent")
    log_in(console, OPERATOR, "alice")
    before = len(audit(clean_db))

    dry = console.get("/parked/bulk-retry?stream=t1/c1/1")
    assert dry.status_code == 200
    assert "Nothing has been done yet" in dry.text and "stay parked" in dry.text
    ids = re.search(r'name="ids" value="([^"]+)"', dry.text)
    assert ids is not None
    assert sorted(ids.group(1).split(",")) == sorted([str(first.event_id), str(second.event_id)])
    assert len(audit(clean_db)) == before  # a dry run is not an action

    # A third event parked since the dry run: its confirm is stale and does nothing.
    third = _park(quarantine, 3, "parent")
    token = csrf(console)
    form = {"csrf": token, "ids": ids.group(1), "stream": "t1/c1/1", "age": ""}
    stale = console.post("/parked/bulk-retry", data=form)
    assert stale.status_code == 409 and error_code(stale) == "FORM_STALE"

    again = console.get("/parked/bulk-retry?stream=t1/c1/1").text
    fresh = re.search(r'name="ids" value="([^"]+)"', again)
    assert fresh is not None and str(third.event_id) in fresh.group(1)
    confirmed = console.post("/parked/bulk-retry", data={**form, "ids": fresh.group(1)})
    assert confirmed.status_code == 303
    last = audit(clean_db)[-1]
    assert (last["action"], last["outcome"]) == ("parked.bulk-retry", "done")
    assert last["detail"].startswith("0 released; 3 still waiting")
    still = console.get("/parked").text
    assert all(f'href="/parked/{e.event_id}"' in still for e in (first, second, third))
