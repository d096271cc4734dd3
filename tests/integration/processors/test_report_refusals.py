"""One stream's refused progress report never holds another's retention (issue 29,
defect 1), against the real resolver API over HTTP.

Six tenants, one catalog each, every event applied. The resolver's history of t2
goes back under what was applied (a restore to position 2 while the consumer holds
4: the resolver answers ``POSITION_BEYOND_COMMITTED``); t4's epoch is fenced. Before
the fix the first refusal ended the pass, so t3 and t5, which sort after t2, were
never reported again (and their outbox never pruned).
"""

from __future__ import annotations

import json

import psycopg
from click.testing import CliRunner
from prometheus_client import REGISTRY
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource, issue_next
from db.product import report_refusals
from db.resolver.fencing import fence_older_epochs
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.cli.main import main
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.reporter import ProgressReporter
from processors.resolver_client import ResolverClient
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC
from tests.fixtures.decisions import accept
from tests.fixtures.resolver_api import RunningApi

CONSUMER = "product-applier"
TENANTS = [f"t{i}" for i in range(1, 7)]
CATALOG = "c1"


def _write(settings: DatabaseSettings, tenant: str, items: int, first: int = 0) -> None:
    """``items`` rule decisions in the tenant's catalog (two positions each)."""
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(settings.control_dsn, ttl_seconds=0)
    for i in range(first, first + items):
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(uow, tenant, CATALOG, ItemChange(tenant, CATALOG, f"i{i}", "lamp", f"lamp {i}"))
    pool.close()
    epochs.close()


def _apply_all(settings: DatabaseSettings) -> None:
    """Every outbox row applied by the live consumer (as Kafka would deliver them)."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT key, value FROM outbox ORDER BY tenant_id, catalog_id, history_epoch, position"
        ).fetchall()
    epochs = EpochSource(settings.control_dsn, ttl_seconds=0)
    applier = Applier(settings.product_dsn, epochs, CODEC, consumer=CONSUMER)
    applier.apply([RawMessage("events", 0, i, bytes(k), bytes(v)) for i, (k, v) in enumerate(rows)])
    applier.close()
    epochs.close()


def _restore_to(settings: DatabaseSettings, tenant: str, position: int) -> None:
    """The resolver's view of the stream as a restore leaves it: its cursor and its
    outbox back at ``position`` (the product side still holds what came after)."""
    with psycopg.connect(settings.resolver_owner_dsn, autocommit=True) as conn:
        where = " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = 1"
        conn.execute(
            "DELETE FROM outbox" + where + " AND position > %s", (tenant, CATALOG, position)
        )
        conn.execute("UPDATE stream_cursor SET position = %s" + where, (position, tenant, CATALOG))
        conn.execute(
            "UPDATE stream_publication SET published_position = least(published_position, %s)"
            + where,
            (position, tenant, CATALOG),
        )


def _fence(settings: DatabaseSettings, tenant: str) -> None:
    """What ``gapless fence-epoch`` does to the epochs: epoch 2 issued in the control
    database, epoch 1 fenced on the resolver."""
    with psycopg.connect(settings.control_dsn) as conn:
        issue_next(conn, tenant, CATALOG, 1, "test", "restored")
    with psycopg.connect(settings.resolver_owner_dsn) as conn:
        fence_older_epochs(conn, tenant, CATALOG, 2)


def _held(settings: DatabaseSettings) -> dict[str, int | None]:
    """Per tenant, the progress the resolver holds for the consumer (absent: none)."""
    with psycopg.connect(settings.resolver_owner_dsn) as conn:
        rows = conn.execute(
            "SELECT tenant_id, reported_position FROM stream_consumer WHERE consumer_id = %s",
            (CONSUMER,),
        ).fetchall()
    return {str(t): p for t, p in rows}


def _refused_gauge(code: str) -> float | None:
    return REGISTRY.get_sample_value("gapless_progress_report_refused", {"code": code})


def test_a_refused_stream_is_recorded_and_every_other_stream_is_still_reported(
    clean_db: DatabaseSettings, resolver_api: RunningApi
) -> None:
    for tenant in TENANTS:
        _write(clean_db, tenant, 2)
    _apply_all(clean_db)
    _restore_to(clean_db, "t2", 2)
    _fence(clean_db, "t4")

    client = ResolverClient(resolver_api.url, resolver_api.token)
    epochs = EpochSource(clean_db.control_dsn)
    reporter = ProgressReporter(clean_db.product_dsn, client, CONSUMER, epochs)
    assert reporter.report_once() == 4
    # t3 and t5 sort after the refused t2 and are reported; t4's fenced epoch is not
    # reported at all (neither acknowledged nor refused).
    assert _held(clean_db) == {"t1": 4, "t3": 4, "t5": 4, "t6": 4}
    with psycopg.connect(clean_db.product_dsn) as conn:
        [refusal] = report_refusals.listed(conn)
    assert (refusal.consumer, refusal.stream, refusal.position, refusal.code) == (
        CONSUMER,
        ("t2", CATALOG, 1),
        4,
        "POSITION_BEYOND_COMMITTED",
    )
    assert "committed is 2" in refusal.message
    assert reporter.refused == {("t2", CATALOG, 1): 4}
    assert _refused_gauge("POSITION_BEYOND_COMMITTED") == 1

    # gapless status shows it, with what to do next, in the table and in --json.
    body = json.loads(CliRunner().invoke(main, ["status", "--json"]).output)
    [shown] = body["report_refused"]
    assert (shown["tenant_id"], shown["history_epoch"], shown["consumer"]) == ("t2", 1, CONSUMER)
    assert (shown["position"], shown["code"]) == (4, "POSITION_BEYOND_COMMITTED")
    assert "gapless fence-epoch --tenant t2 --catalog c1 --epoch 1" in shown["next"]
    table = CliRunner().invoke(main, ["status"]).output
    assert f"REPORT REFUSED t2/c1@1 by {CONSUMER} at 4" in table
    assert "POSITION_BEYOND_COMMITTED" in table and "gapless fence-epoch" in table

    # Refused again on the next pass (it is sent again): the refusal stands, since
    # the same moment; nothing else moved, so nothing else is sent.
    assert reporter.report_once() == 0
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert report_refusals.listed(conn) == [refusal]

    assert "t4" not in _held(clean_db)
    epochs.close()
    client.close()


def test_a_refusal_goes_once_its_epoch_is_fenced(
    clean_db: DatabaseSettings, resolver_api: RunningApi
) -> None:
    # What an operator does about POSITION_BEYOND_COMMITTED: fence the epoch. The old
    # epoch is history from then on: not reported, and its refusal is cleared.
    _write(clean_db, "t2", 2)
    _apply_all(clean_db)
    _restore_to(clean_db, "t2", 2)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    epochs = EpochSource(clean_db.control_dsn)
    reporter = ProgressReporter(clean_db.product_dsn, client, CONSUMER, epochs)
    assert reporter.report_once() == 0
    assert reporter.refused == {("t2", CATALOG, 1): 4}
    _fence(clean_db, "t2")
    assert reporter.report_once() == 0
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert report_refusals.listed(conn) == []
    assert reporter.refused == {}
    assert _refused_gauge("POSITION_BEYOND_COMMITTED") == 0
    assert json.loads(CliRunner().invoke(main, ["status", "--json"]).output)["report_refused"] == []
    epochs.close()
    client.close()


def test_a_refusal_goes_once_a_report_of_its_stream_is_acknowledged(
    clean_db: DatabaseSettings, resolver_api: RunningApi
) -> None:
    # A consumer whose first report falls below what the resolver pruned
    # (CONSUMER_NEEDS_REBUILD): recorded, not sent again at the same position; once
    # rebuilt past the pruned position its report is acknowledged and the row goes.
    _write(clean_db, "t1", 2)
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position) VALUES ('late', 't1', %s, 1, 1)",
            (CATALOG,),
        )
    with psycopg.connect(clean_db.resolver_owner_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO stream_retention (tenant_id, catalog_id, history_epoch, pruned_through)"
            " VALUES ('t1', %s, 1, 3)",
            (CATALOG,),
        )
    client = ResolverClient(resolver_api.url, resolver_api.token)
    epochs = EpochSource(clean_db.control_dsn)
    reporter = ProgressReporter(clean_db.product_dsn, client, "late", epochs)
    assert reporter.report_once() == 0
    with psycopg.connect(clean_db.product_dsn) as conn:
        [refusal] = report_refusals.listed(conn, "late")
    assert (refusal.position, refusal.code) == (1, "CONSUMER_NEEDS_REBUILD")
    assert _refused_gauge("CONSUMER_NEEDS_REBUILD") == 1
    body = json.loads(CliRunner().invoke(main, ["status", "--json"]).output)
    assert (
        "gapless rebuild --tenant t1 --catalog c1 --consumer late"
        in (body["report_refused"][0]["next"])
    )

    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute("UPDATE stream_progress SET position = 4 WHERE consumer = 'late'")
    assert reporter.report_once() == 1
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert report_refusals.listed(conn) == []
    assert _refused_gauge("CONSUMER_NEEDS_REBUILD") == 0
    epochs.close()
    client.close()
