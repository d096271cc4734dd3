"""Catch-up and cutover against the real resolver API, PostgreSQL and S3.

A live applier (fed the resolver's retained copies, the same batch path the Kafka
agent uses) serves generation 1 while a rebuild loads generation 2 from an export at
W, catches up with events written after W, and cuts over: the live row then serves
generation 2 at H, never behind where it was, the projection equals the accepted
state row by row, the lease is released, and the cleanup removes the shadow's rows
and generation 1.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.demo.projection_check import compare
from infra.demo.workload import run_workload
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.gaps import retained_topic
from processors.rebuild import cutover
from processors.rebuild.cleanup import sweep
from processors.rebuild.orchestrator import Orchestrator
from processors.resolver_client import ResolverClient
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from schemas.codec import CODEC
from schemas.ids import StreamId
from tests.fixtures.resolver_api import RunningApi

TENANT, CATALOG = "x", "catalog1"
STREAM = StreamId(TENANT, CATALOG, 1)
LIVE = "product-applier"


@dataclass
class Rig:
    settings: DatabaseSettings
    pool: ConnectionPool
    epochs: EpochSource
    client: ResolverClient
    live: Applier
    orchestrator: Orchestrator
    writes: int = 0

    def write(self, events: int) -> None:
        """Decisions on the catalog; ids of their own each time (``id_tag``)."""
        self.writes += 1
        run_workload(
            self.pool,
            self.epochs,
            [(TENANT, CATALOG)],
            events=events,
            writers=2,
            id_tag=f"w{self.writes}-",
        )

    def feed_live(self, through: int | None = None) -> int:
        """Apply retained copies to the live consumer until ``through`` (or all)."""
        progress = self.progress(LIVE) or 0
        while through is None or progress < through:
            limit = 500 if through is None else min(500, through - progress)
            page = self.client.retained_events(STREAM, progress, limit)
            if not page.events:
                break
            result = self.live.apply(
                [
                    RawMessage(
                        retained_topic(STREAM), -1, e.position, e.key, e.value, STREAM, e.position
                    )
                    for e in page.events
                ]
            )
            progress = result.progress[STREAM]
        return progress

    def progress(self, consumer: str) -> int | None:
        with psycopg.connect(self.settings.product_dsn) as conn:
            row = conn.execute(
                "SELECT position FROM stream_progress WHERE consumer = %s AND tenant_id = %s"
                " AND catalog_id = %s AND history_epoch = %s",
                (consumer, *STREAM),
            ).fetchone()
        return None if row is None else int(row[0])

    def live_row(self) -> tuple[int, int]:
        with psycopg.connect(self.settings.product_dsn) as conn:
            row = conn.execute(
                "SELECT position, generation FROM stream_progress WHERE consumer = %s"
                " AND tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
                (LIVE, *STREAM),
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def committed(self) -> int:
        with psycopg.connect(self.settings.resolver_dsn) as conn:
            row = conn.execute(
                "SELECT position FROM stream_cursor WHERE tenant_id = %s AND catalog_id = %s"
                " AND history_epoch = %s",
                tuple(STREAM),
            ).fetchone()
        assert row is not None
        return int(row[0])

    def request(self) -> uuid.UUID:
        rebuild_id = uuid.uuid4()
        with psycopg.connect(self.settings.product_dsn) as conn:
            assert sql.insert(
                conn, rebuild_id, LIVE, STREAM, f"shadow-{rebuild_id.hex[:6]}", "op", "t"
            )
        return rebuild_id

    def until(self, rebuild_id: uuid.UUID, phase: str) -> list[str]:
        phases: list[str] = []
        deadline = time.monotonic() + 90
        while True:
            row = self.orchestrator.advance(rebuild_id)
            assert row is not None
            if not phases or phases[-1] != row.phase:
                phases.append(row.phase)
            if row.phase in (phase, "failed", "done"):
                return phases
            assert time.monotonic() < deadline, phases

    def row(self, rebuild_id: uuid.UUID) -> sql.RebuildRow:
        with psycopg.connect(self.settings.product_dsn) as conn:
            row = sql.get(conn, rebuild_id)
        assert row is not None
        return row


@pytest.fixture()
def rig(
    clean_db: DatabaseSettings, resolver_api: RunningApi, services: dict[str, str]
) -> Iterator[Rig]:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    store = ExportStore.from_settings(ExportSettings())
    live = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC, LIVE)
    orchestrator = Orchestrator(
        clean_db.product_dsn,
        client,
        store.get,
        "worker-a",
        epochs=EpochSource(clean_db.control_dsn),
        page_size=100,
    )
    rig = Rig(clean_db, pool, epochs, client, live, orchestrator)
    rig.write(300)
    yield rig
    orchestrator.close()
    live.close()
    client.close()
    pool.close()
    epochs.close()


def _accepted_equals(rig: Rig, generation: int) -> None:
    comparison = compare(rig.settings.resolver_dsn, rig.settings.product_dsn, TENANT, generation)
    assert comparison.differences == [], comparison.differences[:5]
    assert sum(comparison.rows.values()) > 0


def test_a_live_consumer_behind_the_export_counts_the_positions_it_skips_as_loaded(
    rig: Rig,
) -> None:
    """The live consumer is still at 50 when the cutover moves it past W: the shadow
    never took the positions in (50, W] one by one (it loaded the export), so they
    count as loaded, once, and the copies the live consumer gets later are
    duplicates by position."""
    assert rig.feed_live(through=50) == 50
    rebuild_id = rig.request()
    assert rig.until(rebuild_id, "catching_up")[-1] == "catching_up"
    w = rig.row(rebuild_id).export_position
    assert w is not None and w > 50
    rig.write(100)
    assert rig.until(rebuild_id, "done")[-1] == "done"
    assert rig.feed_live() == rig.committed()
    _accepted_equals(rig, 2)
    with psycopg.connect(rig.settings.product_dsn) as conn:
        counts = conn.execute(
            "SELECT applied_count, ignored_count, loaded_count, duplicate_count"
            " FROM stream_progress WHERE consumer = %s",
            (LIVE,),
        ).fetchone()
    assert counts is not None
    applied, ignored, loaded, duplicates = counts
    assert loaded == w - 50
    assert applied + ignored + loaded == rig.committed()
    assert duplicates == 0  # the feed starts at the progress, which H moved past W


def test_catch_up_and_cutover_serve_the_new_generation_from_h(rig: Rig) -> None:
    live_before = rig.feed_live()
    rebuild_id = rig.request()
    assert rig.until(rebuild_id, "catching_up")[-1] == "catching_up"
    w = rig.row(rebuild_id).export_position
    assert w is not None
    rig.write(200)  # events after W: the shadow must catch up with them
    rig.feed_live(through=live_before + 50)  # the live consumer moves on meanwhile
    phases = rig.until(rebuild_id, "done")
    assert phases[-1] == "done" and "cutting_over" in phases
    row = rig.row(rebuild_id)
    position, generation = rig.live_row()
    assert generation == row.generation == 2 and row.previous_generation == 1
    assert row.target_position is not None and row.target_position > w
    assert position == row.target_position >= live_before + 50  # never backwards
    assert row.cutover_pause_ms is not None and row.cutover_pause_ms >= 0
    assert set(row.timings) >= {"requested", "leased", "exporting", "loading", "catching_up"}
    # The live consumer carries on after H, into the generation it now serves, and
    # its row counts every position's outcome once (its own, then the shadow's).
    assert rig.feed_live() == rig.committed()
    _accepted_equals(rig, 2)
    with psycopg.connect(rig.settings.product_dsn) as conn:
        counted = conn.execute(
            "SELECT applied_count + ignored_count, loaded_count FROM stream_progress"
            " WHERE consumer = %s",
            (LIVE,),
        ).fetchone()
    assert counted == (rig.committed(), 0)  # the live consumer had passed W: none loaded
    with psycopg.connect(rig.settings.resolver_dsn) as conn:
        released = conn.execute("SELECT released_at IS NOT NULL FROM rebuild_lease").fetchall()
    assert released == [(True,)]
    # Cleanup: the shadow's rows and the retired generation 1 go, generation 2 stays.
    swept = sweep(rig.settings.product_dsn, rig.client, batch=50, max_batches=10_000)
    assert swept.rebuilds_cleaned == 1 and swept.generation_rows > 0 and not swept.more
    with psycopg.connect(rig.settings.product_dsn) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM product_item WHERE generation = 1),"
            " (SELECT count(*) FROM product_item WHERE generation = 2),"
            " (SELECT count(*) FROM inbox WHERE consumer = %s),"
            " (SELECT count(*) FROM stream_progress WHERE consumer = %s)",
            (row.shadow_consumer, row.shadow_consumer),
        ).fetchone()
    assert left is not None and left[0] == 0 and left[1] > 0 and left[2:] == (0, 0)
    assert rig.row(rebuild_id).cleaned_at is not None
    _accepted_equals(rig, 2)


def test_a_live_consumer_ahead_of_the_shadow_is_caught_up_to_while_paused(rig: Rig) -> None:
    rig.feed_live()
    rebuild_id = rig.request()
    rig.until(rebuild_id, "catching_up")
    rig.until(rebuild_id, "cutting_over")
    rig.write(150)
    ahead = rig.feed_live()  # the live consumer took events the shadow has not seen
    shadow = rig.orchestrator.shadow(rig.row(rebuild_id))
    assert (rig.progress(shadow.consumer) or 0) < ahead
    done = cutover.cut_over(
        rig.settings.product_dsn,
        rig.client,
        shadow,
        rebuild_id,
        lambda: 1,
        page_size=40,
    )
    assert done is not None and done.target >= ahead == done.received_through
    assert rig.live_row() == (done.target, 2)
    # A crash now (before the lease release): the next step only finishes.
    assert rig.until(rebuild_id, "done") == ["done"]
    assert rig.live_row() == (done.target, 2)
    _accepted_equals(rig, 2)


def test_what_the_live_consumer_held_open_below_h_is_settled_at_cutover(rig: Rig) -> None:
    rig.feed_live()
    # The live consumer parked an event and quarantined another, both below H.
    with psycopg.connect(rig.settings.product_dsn) as conn:
        conn.execute(
            "INSERT INTO inbox (consumer, event_id, tenant_id, catalog_id, history_epoch,"
            " position, event_type, outcome) VALUES"
            " (%s, %s, %s, %s, 1, 3, 'x', 'parked'), (%s, %s, %s, %s, 1, 4, 'x', 'quarantined')",
            (
                LIVE,
                uuid.uuid4(),
                TENANT,
                CATALOG,
                LIVE,
                parked_quarantined := uuid.uuid4(),
                TENANT,
                CATALOG,
            ),
        )
        parked_id = conn.execute(
            "SELECT event_id FROM inbox WHERE consumer = %s AND outcome = 'parked'", (LIVE,)
        ).fetchone()
        assert parked_id is not None
        conn.execute(
            "INSERT INTO parked_event (consumer, event_id, tenant_id, catalog_id, history_epoch,"
            " position, value) VALUES (%s, %s, %s, %s, 1, 3, '\\x00')",
            (LIVE, parked_id[0], TENANT, CATALOG),
        )
        conn.execute(
            "INSERT INTO parked_dependency (consumer, event_id, tenant_id, catalog_id,"
            " aggregate_type, aggregate_id, revision) VALUES (%s, %s, %s, %s, 'catalog_item',"
            " 'nope', 9)",
            (LIVE, parked_id[0], TENANT, CATALOG),
        )
        conn.execute(
            'INSERT INTO quarantine (consumer, topic, partition, "offset", event_id, tenant_id,'
            " catalog_id, history_epoch, position, error_code, error_detail)"
            " VALUES (%s, 't', 0, 1, %s, %s, %s, 1, 4, 'APPLY_FAILED', 'x')",
            (LIVE, parked_quarantined, TENANT, CATALOG),
        )
    rebuild_id = rig.request()
    assert rig.until(rebuild_id, "done")[-1] == "done"
    with psycopg.connect(rig.settings.product_dsn) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM parked_event WHERE consumer = %s),"
            " (SELECT count(*) FROM parked_dependency WHERE consumer = %s),"
            " (SELECT count(*) FROM inbox WHERE consumer = %s"
            "  AND outcome IN ('parked', 'quarantined')),"
            " (SELECT status || ': ' || resolution FROM quarantine WHERE consumer = %s)",
            (LIVE, LIVE, LIVE, LIVE),
        ).fetchone()
    assert left is not None and left[:3] == (0, 0, 0)
    assert str(left[3]).startswith(f"superseded: rebuild {rebuild_id} cut over at position")


def test_a_cancelled_rebuild_never_serves_and_is_cleaned_up(rig: Rig) -> None:
    rig.feed_live()
    rebuild_id = rig.request()
    rig.until(rebuild_id, "catching_up")
    with psycopg.connect(rig.settings.product_dsn) as conn:
        sql.update(conn, rebuild_id, "cancelled", error_message="by test")
    assert rig.orchestrator.advance(rebuild_id) is None  # finished: nothing to claim
    assert rig.live_row()[1] == 1
    swept = sweep(rig.settings.product_dsn, rig.client, batch=100, max_batches=10_000)
    assert swept.rebuilds_cleaned == 1 and swept.generation_rows > 0
    with psycopg.connect(rig.settings.product_dsn) as conn:
        gens = conn.execute("SELECT DISTINCT generation FROM product_item").fetchall()
    with psycopg.connect(rig.settings.resolver_dsn) as conn:
        released = conn.execute("SELECT released_at IS NOT NULL FROM rebuild_lease").fetchall()
    assert gens == [(1,)] and released == [(True,)]
    _accepted_equals(rig, 1)


def test_a_rebuild_cutting_over_can_no_longer_be_cancelled(rig: Rig) -> None:
    from datetime import UTC, datetime

    from processors.rebuild.requests import accept
    from schemas.control import ControlCommand

    rig.feed_live()
    rebuild_id = rig.request()
    assert rig.until(rebuild_id, "cutting_over")[-1] == "cutting_over"
    cancel = ControlCommand(
        command_id=uuid.uuid4(),
        kind="cancel",
        tenant_id=TENANT,
        catalog_id=CATALOG,
        rebuild_id=rebuild_id,
        requested_by="op",
        reason="late",
        requested_at=datetime.now(UTC),
    )
    answer = accept(rig.settings.product_dsn, cancel, LIVE, lambda _t, _c: 1)
    assert answer.status == "refused" and "too late" in answer.message
    assert rig.until(rebuild_id, "done")[-1] == "done"


def test_a_shadow_held_by_a_quarantined_event_waits_for_its_repair(rig: Rig) -> None:
    """The shadow quarantines an event it cannot apply, like the live path: the
    rebuild waits in catching_up saying which entry holds it (CATCHUP_BLOCKED) and
    never cuts over past it; the operator's retry of that entry (its own consumer's,
    the shadow's) lets it finish."""
    from processors.applier.repair import list_entries, retry

    rig.feed_live()
    rebuild_id = rig.request()
    rig.until(rebuild_id, "catching_up")
    row = rig.row(rebuild_id)
    rig.write(120)
    with psycopg.connect(rig.settings.resolver_dsn) as conn:
        values = conn.execute(
            "SELECT value FROM outbox WHERE position > %s AND event_type LIKE 'catalog_item.%%'"
            " ORDER BY position",
            (row.export_position,),
        ).fetchall()
    item = CODEC.decode_value(values[0][0]).aggregate.id
    with psycopg.connect(rig.settings.product_dsn, autocommit=True) as conn:
        conn.execute(  # the shadow's write of that item fails, as a broken row would
            "CREATE FUNCTION refuse_item() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'refused for the test'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_item BEFORE INSERT OR UPDATE ON product_item FOR EACH ROW"
            f" WHEN (NEW.generation = {row.generation} AND NEW.item_id = '{item}')"
            " EXECUTE FUNCTION refuse_item()"
        )
    try:
        for _ in range(3):  # however often it looks, it waits
            waiting = rig.orchestrator.advance(rebuild_id)
        assert waiting is not None and waiting.phase == "catching_up", rig.row(rebuild_id)
        assert waiting.error_code == "CATCHUP_BLOCKED", waiting
        with psycopg.connect(rig.settings.product_dsn) as conn:
            entries = [e for e in list_entries(conn) if e.consumer == row.shadow_consumer]
        assert entries and f"#{entries[0].id}" in (waiting.error_message or "")
        assert rig.live_row()[1] == 1  # still serving the old generation
    finally:
        with psycopg.connect(rig.settings.product_dsn, autocommit=True) as conn:
            conn.execute("DROP TRIGGER refuse_item ON product_item")
            conn.execute("DROP FUNCTION refuse_item()")
    # The fix is in: the operator retries the shadow's entries (through the live
    # consumer's tools: the entry names its consumer).
    for entry in entries:
        assert retry(rig.settings.product_dsn, rig.live, entry.id, "op") is True
    assert rig.until(rebuild_id, "done")[-1] == "done"
    assert rig.row(rebuild_id).error_code is None
    assert rig.feed_live() == rig.committed()
    _accepted_equals(rig, 2)


def test_the_pruner_keeps_what_the_pin_holds_and_a_lease_lost_in_catch_up_starts_over(
    rig: Rig,
) -> None:
    """Everything published and the live consumer's progress reported: the pruner
    still stops at the rebuild's pin W. The lease then expires during catch-up: the
    export-events call answers 410, the rebuild starts over with a new lease and
    export (attempt 2) and finishes; once the lease is released the pruner goes on."""
    from producers.retention.pruner import RetentionPolicy, prune_all
    from tests.integration.producers.retention.streams import expire_lease, publish

    live = rig.feed_live()
    rebuild_id = rig.request()
    rig.until(rebuild_id, "catching_up")
    first = rig.row(rebuild_id)
    assert first.export_position is not None and first.lease_id is not None
    rig.write(150)
    publish(rig.settings, STREAM, rig.committed())
    rig.client.report_progress(STREAM, LIVE, rig.feed_live())
    policy = RetentionPolicy(age_seconds=0, batch_size=50)
    with psycopg.connect(rig.settings.resolver_owner_dsn, autocommit=True) as conn:
        [pruned] = prune_all(conn, policy)
    assert pruned.pruned_through == first.export_position  # held at the pin W
    assert live >= first.export_position

    expire_lease(rig.settings, first.lease_id)
    again = rig.orchestrator.advance(rebuild_id)
    assert again is not None and (again.phase, again.attempt) == ("requested", 2), again
    assert again.error_code == "LEASE_GONE"
    assert rig.until(rebuild_id, "done")[-1] == "done"
    done = rig.row(rebuild_id)
    assert done.attempt == 2 and done.generation == 3  # a new generation, never on top
    assert rig.live_row()[1] == 3
    assert rig.feed_live() == rig.committed()
    _accepted_equals(rig, 3)
    rig.client.report_progress(STREAM, LIVE, rig.committed())
    with psycopg.connect(rig.settings.resolver_owner_dsn, autocommit=True) as conn:
        [after] = prune_all(conn, policy)
    assert after.pruned_through == rig.committed()


def test_after_a_fence_the_catalog_is_rebuilt_at_the_new_epoch_and_goes_on_there(
    rig: Rig,
) -> None:
    """The fence procedure's steps, then its rebuild: the new epoch's stream starts
    empty, the rebuild loads the accepted state into a new generation and cuts the
    new epoch's live row over to it; writes continue at epoch 2 from position 1 and
    apply into that generation; late copies of epoch 1 are ignored, audited."""
    from db.control.epochs import issue_next
    from db.resolver.fencing import fence_older_epochs, settle_old_epochs
    from processors.rebuild.requests import accept
    from schemas.control import ControlCommand

    rig.feed_live()
    old_positions = rig.committed()
    with psycopg.connect(rig.settings.control_dsn) as conn:
        assert issue_next(conn, TENANT, CATALOG, 1, "op", "drill").epoch == 2
        conn.commit()
    with psycopg.connect(rig.settings.resolver_owner_dsn) as conn:
        assert [f.stream for f in fence_older_epochs(conn, TENANT, CATALOG, 2)] == [STREAM]
        conn.commit()
    with psycopg.connect(rig.settings.product_dsn) as conn:
        settle_old_epochs(conn, LIVE, TENANT, CATALOG, 2)
        conn.commit()
    request = ControlCommand(
        command_id=uuid.uuid4(),
        kind="rebuild",
        tenant_id=TENANT,
        catalog_id=CATALOG,
        requested_by="op",
        reason="fence",
        requested_at=datetime.now(UTC),
    )
    answer = accept(rig.settings.product_dsn, request, LIVE, lambda _t, _c: 2)
    assert answer.status == "started" and answer.row is not None
    assert answer.row.stream == StreamId(TENANT, CATALOG, 2)
    assert rig.until(request.command_id, "done")[-1] == "done"
    done = rig.row(request.command_id)
    assert (done.export_position, done.target_position, done.generation) == (0, 0, 2)
    _accepted_equals(rig, 2)

    new = StreamId(TENANT, CATALOG, 2)
    rig.write(100)  # the writers go on, at epoch 2
    with psycopg.connect(rig.settings.resolver_dsn) as conn:
        first = conn.execute(
            "SELECT min(position), max(position) FROM outbox WHERE history_epoch = 2"
        ).fetchone()
    assert first is not None and first[0] == 1
    page = rig.client.retained_events(new, 0, 500)
    result = rig.live.apply(
        [
            RawMessage(retained_topic(new), -1, e.position, e.key, e.value, new, e.position)
            for e in page.events
        ]
    )
    assert result.progress[new] == first[1]
    with psycopg.connect(rig.settings.product_dsn) as conn:
        row = conn.execute(
            "SELECT generation FROM stream_progress WHERE consumer = %s AND history_epoch = 2",
            (LIVE,),
        ).fetchone()
    assert row == (2,)
    _accepted_equals(rig, 2)
    # A late copy of an epoch-1 event: audited, ignored, never applied.
    late = rig.client.retained_events(STREAM, old_positions - 1, 1).events
    replay = rig.live.apply([RawMessage("late", 0, 1, e.key, e.value, None, None) for e in late])
    assert replay.applied == 0 and (replay.duplicates + replay.ignored) == len(late)
