"""Deliveries the applier keeps aside (``processors.applier.deferred``) against real
PostgreSQL, the resolver API and S3: a new epoch's events wait for the cutover at
that epoch and then apply in the rebuilt generation; a resume with no cutover serves
nothing of the new epoch from the old generation; an old epoch's events deferred by
a pause get their audited ``ignored_old_epoch`` after the resume; and a crash between
keeping and handing back loses nothing and doubles nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import psycopg
import pytest
from fastapi.testclient import TestClient

from db.control import pauses
from db.control.epochs import EpochSource, ensure_epoch, issue_next
from db.control.pauses import PauseWatch
from db.product import cutover
from db.resolver.fencing import fence_older_epochs, settle_old_epochs
from db.settings import DatabaseSettings
from infra.demo.workload import run_workload
from processors.applier import deferred
from processors.applier.batch import DEFAULT_CONSUMER, Applier
from processors.applier.messages import RawMessage
from processors.gaps import GapCloser
from processors.rebuild import cutover as rebuild_cutover
from processors.rebuild.requests import accept
from processors.resolver_client import ResolverClient
from processors.serving.app import create_app
from schemas.codec import CODEC
from schemas.control import ControlCommand
from schemas.events import Envelope
from schemas.ids import StreamId
from schemas.topics import EVENTS_TOPIC
from tests.fixtures.applier_crash import AFTER_COMMIT, BEFORE_COMMIT
from tests.fixtures.resolver_api import RunningApi
from tests.fixtures.waits import wait_for
from tests.integration.processors.applier.test_applier_faults import (
    CATALOG,
    TENANT,
    Partition,
    run_and_die,
    upsert,
)
from tests.integration.processors.rebuild import test_cutover as cutover_tests
from tests.integration.processors.rebuild.test_cutover import Rig
from tests.integration.processors.serving.conftest import auth, read_api_settings

rig = cutover_tests.rig  # writers, a live applier and an orchestrator on one catalog


def _fence(settings: DatabaseSettings, tenant: str, catalog: str, consumer: str) -> None:
    """``gapless fence-epoch``'s steps 2-4: epoch 2 issued, epoch 1 fenced, settled."""
    with psycopg.connect(settings.control_dsn) as conn:
        assert issue_next(conn, tenant, catalog, 1, "op", "restored").epoch == 2
        conn.commit()
    with psycopg.connect(settings.resolver_owner_dsn) as conn:
        fence_older_epochs(conn, tenant, catalog, 2)
        conn.commit()
    with psycopg.connect(settings.product_dsn) as conn:
        settle_old_epochs(conn, consumer, tenant, catalog, 2)
        conn.commit()


def _kept(dsn: str, consumer: str = DEFAULT_CONSUMER) -> list[tuple[int, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT position, reason FROM deferred_delivery WHERE consumer = %s"
            " ORDER BY history_epoch, position",
            (consumer,),
        ).fetchall()
    return [(int(p), str(r)) for p, r in rows]


def _query(dsn: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]


def test_a_new_epochs_events_wait_for_its_cutover_then_apply_in_the_rebuilt_generation(
    rig: Rig,
) -> None:
    """Epoch 2's events reach the live applier before its rebuild cuts over, some of
    them above the cutover's H: none lands in generation 1, none gets a live row;
    after the cutover the gap closer hands them back: those at or below H are
    duplicates (the rebuild loaded or applied them), those above H apply in the new
    generation, and the projection equals the accepted state."""
    settings = rig.settings
    rig.feed_live()
    _fence(settings, cutover_tests.TENANT, cutover_tests.CATALOG, cutover_tests.LIVE)
    new = StreamId(cutover_tests.TENANT, cutover_tests.CATALOG, 2)
    fresh_epochs = EpochSource(settings.control_dsn, ttl_seconds=0)
    sent = 0

    def write_and_deliver(events: int, tag: str) -> int:
        """Epoch 2's new outbox rows, delivered as Kafka delivers them; how many held."""
        nonlocal sent
        run_workload(
            rig.pool,
            fresh_epochs,
            [(cutover_tests.TENANT, cutover_tests.CATALOG)],
            events=events,
            writers=2,
            id_tag=tag,
        )
        with psycopg.connect(settings.resolver_dsn) as conn:
            rows = conn.execute(
                "SELECT position, key, value FROM outbox WHERE history_epoch = 2"
                " AND position > %s ORDER BY position",
                (sent,),
            ).fetchall()
        messages = [RawMessage(EVENTS_TOPIC, 0, int(p) - 1, bytes(k), bytes(v)) for p, k, v in rows]
        sent += len(messages)
        result = rig.live.apply(messages)
        assert (result.applied, result.ignored, result.parked) == (0, 0, 0), result
        return result.held

    generation_1 = _query(
        settings.product_dsn, "SELECT count(*) FROM product_item WHERE generation = 1"
    )
    held = write_and_deliver(60, "e2a-")
    assert held == sent > 0
    request = ControlCommand(
        command_id=uuid.uuid4(),
        kind="rebuild",
        tenant_id=new.tenant_id,
        catalog_id=new.catalog_id,
        requested_by="op",
        reason="fence",
        requested_at=datetime.now(UTC),
    )
    answer = accept(settings.product_dsn, request, cutover_tests.LIVE, lambda _t, _c: 2)
    assert answer.status == "started"
    assert rig.until(request.command_id, "cutting_over")[-1] == "cutting_over"
    # The shadow reached its target H; what is written now is above H.
    before_cutover = sent
    held += write_and_deliver(40, "e2b-")
    assert held == sent > before_cutover
    kept = _kept(settings.product_dsn, cutover_tests.LIVE)
    assert kept == [(p, "epoch_held") for p in range(1, sent + 1)]
    assert _query(
        settings.product_dsn,
        "SELECT count(*) FROM stream_progress WHERE consumer = %s AND history_epoch = 2",
        cutover_tests.LIVE,
    ) == [(0,)]  # no live row of epoch 2 (the shadow has its own): nothing served yet
    assert (
        _query(settings.product_dsn, "SELECT count(*) FROM product_item WHERE generation = 1")
        == generation_1
    )

    # The swap, before the shadow catches up with those: it needs only H >= R, and
    # the live consumer took none of them into its inbox (R = 0).
    shadow = rig.orchestrator.shadow(rig.row(request.command_id))
    swapped = rebuild_cutover.cut_over(
        settings.product_dsn, rig.client, shadow, request.command_id, lambda: 2
    )
    assert swapped is not None and swapped.target <= before_cutover
    assert rig.until(request.command_id, "done")[-1] == "done"
    done = rig.row(request.command_id)
    assert done.target_position is not None and done.generation is not None
    h = done.target_position
    assert 0 < h < sent  # the held events above H are the rebuild's to miss

    closer = GapCloser(settings.product_dsn, rig.client, rig.live, cutover_tests.LIVE)
    back = closer.hand_back_deferred()
    assert (back.received, back.duplicates, back.applied + back.ignored) == (sent, h, sent - h)
    assert back.held == back.deferred == 0
    assert _kept(settings.product_dsn, cutover_tests.LIVE) == []
    row = _query(
        settings.product_dsn,
        "SELECT position, generation FROM stream_progress WHERE consumer = %s"
        " AND history_epoch = 2",
        cutover_tests.LIVE,
    )
    assert row == [(sent, done.generation)]
    cutover_tests._accepted_equals(rig, done.generation)
    # Applied in the new generation only; a late Kafka copy is a duplicate.
    assert (
        _query(settings.product_dsn, "SELECT count(*) FROM product_item WHERE generation = 1")
        == generation_1
    )
    fresh_epochs.close()


def _t1(envelope: Envelope) -> Envelope:
    return replace(envelope, tenant_id="t1", catalog_id="c1")


@pytest.fixture()
def watch(clean_db: DatabaseSettings) -> Iterator[PauseWatch]:
    made = PauseWatch(clean_db.control_dsn, "test", poll_seconds=0.2, drain_seconds=30)
    yield made.start()
    made.stop()


def test_a_manual_resume_without_a_cutover_serves_nothing_of_the_new_epoch(
    clean_db: DatabaseSettings, resolver_api: RunningApi, watch: PauseWatch
) -> None:
    """A restore lost epoch 1's positions 2-3; the fence issued epoch 2, whose
    rebuild never cut over (it failed, or nobody waited for it), and an operator
    resumed by hand. Epoch 2's events, deferred by the pause and delivered after it,
    are held: the read API answers ``CATALOG_NOT_SERVED`` rather than the old
    generation's rows of lost history, and epoch 2 wrote nothing there."""
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, "t1", "c1")
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    applier = Applier(clean_db.product_dsn, epochs, CODEC, pauses=watch)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    closer = GapCloser(clean_db.product_dsn, client, applier, DEFAULT_CONSUMER, pauses=watch)
    partition = Partition()
    path = "/v1/tenants/t1/catalogs/c1/items"
    assert applier.apply([partition.event(_t1(upsert(p, f"i{p}", 1))) for p in (1, 2, 3)]).applied
    with TestClient(create_app(read_api_settings(clean_db))) as api:
        items = api.get(path, headers=auth()).json()["items"]
        assert [i["item_id"] for i in items] == ["i1", "i2", "i3"]

        with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
            pauses.open_pause(conn, "t1", "c1", "ops", "restore")
        watch.refresh()
        _fence(clean_db, "t1", "c1", DEFAULT_CONSUMER)
        paused = applier.apply([partition.event(_t1(upsert(1, "n1", 1, epoch=2)))])
        assert paused.deferred == 1
        with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
            assert pauses.resume(conn, "t1", "c1", "ops") is not None
        watch.refresh()
        after = applier.apply([partition.event(_t1(upsert(2, "n2", 1, epoch=2)))])
        assert (after.held, after.applied) == (1, 0)
        again = closer.close_once()  # the paused one is handed back: held now
        assert again == {}
        assert _kept(clean_db.product_dsn) == [(1, "epoch_held"), (2, "epoch_held")]

        reader = api.app.state.reader  # type: ignore[attr-defined]

        def resumed_at_epoch_2() -> bool:
            known = reader.epochs.epochs([("t1", "c1")]) == {("t1", "c1"): 2}
            return known and api.get(path, headers=auth()).status_code != 503

        wait_for(resumed_at_epoch_2, "the read API to hear the resume and the new epoch", 15)
        answer = api.get(path, headers=auth())
        assert (answer.status_code, answer.json()["code"]) == (404, "CATALOG_NOT_SERVED")
    assert _query(
        clean_db.product_dsn, "SELECT item_id FROM product_item WHERE tenant_id = 't1' ORDER BY 1"
    ) == [("i1",), ("i2",), ("i3",)]
    client.close()
    applier.close()
    epochs.close()


def test_an_old_epochs_deliveries_deferred_by_a_pause_get_their_audit_after_the_resume(
    clean_db: DatabaseSettings, resolver_api: RunningApi, watch: PauseWatch
) -> None:
    """Deferred while the catalog was paused, of the then current epoch 1; the fence
    then superseded epoch 1, so the gap closer never fills its stream. After the
    resume the kept deliveries are handed back and end ``ignored_old_epoch``, audited,
    and epoch 1's progress passes them."""
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    applier = Applier(clean_db.product_dsn, epochs, CODEC, pauses=watch)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    closer = GapCloser(clean_db.product_dsn, client, applier, DEFAULT_CONSUMER, pauses=watch)
    partition = Partition()
    assert applier.apply([partition.event(upsert(1, "a", 1))]).applied == 1
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        pauses.open_pause(conn, TENANT, CATALOG, "ops", "restore")
    watch.refresh()
    late = [upsert(2, "b", 1), upsert(3, "c", 1)]
    result = applier.apply([partition.event(e) for e in late])
    assert (result.deferred, result.applied) == (2, 0)
    assert _kept(clean_db.product_dsn) == [(2, "paused"), (3, "paused")]
    _fence(clean_db, TENANT, CATALOG, DEFAULT_CONSUMER)
    assert closer.close_once() == {}
    assert len(_kept(clean_db.product_dsn)) == 2  # still paused: not due

    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        assert pauses.resume(conn, TENANT, CATALOG, "ops") is not None
    watch.refresh()
    closer.close_once()
    assert _kept(clean_db.product_dsn) == []
    outcomes = _query(
        clean_db.product_dsn,
        "SELECT position, outcome FROM inbox WHERE consumer = %s ORDER BY position",
        DEFAULT_CONSUMER,
    )
    assert outcomes == [(1, "applied"), (2, "ignored_old_epoch"), (3, "ignored_old_epoch")]
    assert _query(
        clean_db.product_dsn,
        "SELECT history_epoch, position, applied_count, ignored_count FROM stream_progress"
        " WHERE consumer = %s",
        DEFAULT_CONSUMER,
    ) == [(1, 3, 1, 2)]
    assert _query(clean_db.product_dsn, "SELECT item_id FROM product_item") == [("a",)]
    client.close()
    applier.close()
    epochs.close()


def test_a_crash_between_keeping_and_handing_back_loses_nothing_and_doubles_nothing(
    clean_db: DatabaseSettings,
) -> None:
    """A process keeps epoch 2's events (held) and dies after its COMMIT, before Kafka
    heard of it: Kafka delivers them again and they are kept once. After the cutover
    one hand-back dies inside its transaction (nothing changes), the next dies right
    after its COMMIT (all applied, the rows gone); handing back again and Kafka's
    late copies then find nothing to do: every event applied once."""
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    _fence(clean_db, TENANT, CATALOG, DEFAULT_CONSUMER)
    partition = Partition()
    events = [upsert(p, f"i{p}", 1, epoch=2) for p in (1, 2, 3)]
    messages = [partition.event(e) for e in events]

    run_and_die(clean_db, AFTER_COMMIT, messages)  # kept, offsets recorded, then killed
    assert _kept(clean_db.product_dsn) == [(p, "epoch_held") for p in (1, 2, 3)]
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    assert applier.apply(messages).held == 3  # Kafka's redelivery: kept once
    assert _kept(clean_db.product_dsn) == [(p, "epoch_held") for p in (1, 2, 3)]

    with psycopg.connect(clean_db.product_dsn) as conn:  # the cutover at epoch 2
        stream = StreamId(TENANT, CATALOG, 2)
        cutover.lock_live(conn, DEFAULT_CONSUMER, stream)
        cutover.swap(conn, DEFAULT_CONSUMER, stream, 2, 0)
        conn.commit()
    with psycopg.connect(clean_db.product_dsn) as conn:
        page = deferred.due(conn, DEFAULT_CONSUMER, frozenset(), applier.current_epochs, 100)
    assert [m.position for m in page] == [1, 2, 3]

    report = run_and_die(clean_db, BEFORE_COMMIT, page)
    assert report == {"inbox_rows_in_transaction": 3}  # written, never committed
    assert _kept(clean_db.product_dsn) == [(p, "epoch_held") for p in (1, 2, 3)]
    assert _query(clean_db.product_dsn, "SELECT count(*) FROM inbox") == [(0,)]

    assert run_and_die(clean_db, AFTER_COMMIT, page)["applied"] == 3
    assert _kept(clean_db.product_dsn) == []

    client = ResolverClient("http://127.0.0.1:9", "unused")  # handing back asks nothing
    closer = GapCloser(clean_db.product_dsn, client, applier, DEFAULT_CONSUMER)
    assert closer.hand_back_deferred().received == 0
    assert applier.apply(page).duplicates == 3  # the dead hand-back's page, again
    assert applier.apply(messages).duplicates == 3  # Kafka's late copies
    assert _query(
        clean_db.product_dsn,
        "SELECT item_id, generation FROM product_item ORDER BY 1",
    ) == [("i1", 2), ("i2", 2), ("i3", 2)]
    assert _query(
        clean_db.product_dsn,
        "SELECT history_epoch, position, applied_count, duplicate_count FROM stream_progress",
    ) == [(2, 3, 3, 6)]
    client.close()
    applier.close()
    epochs.close()
