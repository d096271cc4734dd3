"""Retention protects every stream and every consumer: a standing consumer holds
streams it has never reported on, and a consumer whose first report falls below
what is pruned is refused, recorded and shown, never accepted silently."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from fastapi.testclient import TestClient

from db.resolver import retention as sql
from db.settings import DatabaseSettings
from producers.retention import consumers
from producers.retention.exceptions import ConsumerNeedsRebuild, ConsumerNotFound
from producers.retention.metrics import RetentionCollector
from producers.retention.pruner import RetentionPolicy, prune_stream
from producers.retention.report import stream_report
from producers.retention.service import declare_configured
from producers.retention.settings import RetentionSettings
from schemas.ids import StreamId
from tests.integration.producers.retention.conftest import ALL_TOKEN, auth
from tests.integration.producers.retention.streams import ready_stream, retained_positions

POLICY = RetentionPolicy(age_seconds=600, batch_size=1000)


def conn_of(settings: DatabaseSettings) -> psycopg.Connection:
    return psycopg.connect(settings.resolver_dsn, autocommit=True)


def prune(settings: DatabaseSettings, stream: StreamId) -> tuple[int, str]:
    with conn_of(settings) as conn:
        result = prune_stream(conn, stream, POLICY)
    return result.pruned_through, result.limited_by


def test_a_standing_consumer_holds_a_stream_it_has_never_reported_on(
    clean_db: DatabaseSettings,
) -> None:
    """Before: nobody registered, so old published events went by age alone, also
    the events of a consumer that never received a message of this stream."""
    held = ready_stream(clean_db, n=12, published=12, old=12, catalog="held")
    with conn_of(clean_db) as conn:
        assert consumers.declare_standing(conn, "agents", "test")
        assert not consumers.declare_standing(conn, "agents", "test")  # idempotent
    assert prune(clean_db, held) == (0, "consumer 'agents' at 0")
    assert retained_positions(clean_db, held) == list(range(1, 13))

    # It shows where an operator looks: as the consumer holding the floor.
    with conn_of(clean_db) as conn:
        [state] = stream_report(conn, held)
    [lag] = state.consumers
    assert (lag.consumer_id, lag.standing, lag.reported_position, lag.lag) == (
        "agents",
        True,
        None,
        12,
    )
    assert state.held_by is not None and state.held_by.name == "agents"

    # Once it reports, its own progress holds the stream, as any consumer's does.
    with conn_of(clean_db) as conn:
        consumers.report(conn, held, "agents", 5)
    assert prune(clean_db, held) == (5, "consumer 'agents' at 5")

    # Retired, it no longer holds streams it never reported on (its registration on
    # this one stays until deregistered).
    fresh = ready_stream(clean_db, n=4, published=4, old=4, catalog="fresh")
    with conn_of(clean_db) as conn:
        consumers.retire_standing(conn, "agents")
        with pytest.raises(ConsumerNotFound):
            consumers.retire_standing(conn, "agents")
    assert prune(clean_db, fresh) == (4, "publication")
    assert prune(clean_db, held)[0] == 5


def test_a_declaration_waits_for_a_prune_batch_in_flight(clean_db: DatabaseSettings) -> None:
    """A batch that read the holders before the declaration committed could delete
    what the declaration promises; the declaration therefore waits for it."""
    with conn_of(clean_db) as batch, conn_of(clean_db) as watcher:
        batch.execute("BEGIN")
        sql.lock_standing_shared(batch)
        declared = threading.Event()

        def declare() -> None:
            with conn_of(clean_db) as conn:
                consumers.declare_standing(conn, "late", "test")
            declared.set()

        thread = threading.Thread(target=declare)
        thread.start()
        # wait until the declaration is blocked on the lock, not for a fixed time
        deadline = time.monotonic() + 30
        while not watcher.execute(
            "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()[0]:  # type: ignore[index]
            assert thread.is_alive() and time.monotonic() < deadline
        assert not declared.is_set()
        batch.execute("COMMIT")
        thread.join(timeout=30)
        assert declared.is_set()


def test_the_retention_service_declares_the_configured_consumers(
    clean_db: DatabaseSettings,
) -> None:
    settings = RetentionSettings(
        resolver_dsn=clean_db.resolver_dsn,
        control_dsn=clean_db.control_dsn,
        retention_consumers=" product-applier, analytics ",
    )
    declare_configured(settings)
    declare_configured(settings)
    with conn_of(clean_db) as conn:
        names = [row.consumer_id for row in sql.standing_consumers(conn)]
    assert names == ["analytics", "product-applier"]


def test_a_bad_consumer_name_in_the_setting_fails_at_start_up() -> None:
    with pytest.raises(ValueError, match="consumer id"):
        RetentionSettings(retention_consumers="ok, not ok")


def test_a_first_report_below_pruned_through_is_refused_and_recorded(
    clean_db: DatabaseSettings,
) -> None:
    """Before: a consumer that first reported 3 on a stream pruned through 8 was
    registered at 3 and nothing noticed that positions 4..8 never reached it."""
    stream = ready_stream(clean_db, n=12, published=12, old=12)
    with conn_of(clean_db) as conn:
        consumers.report(conn, stream, "early", 8)
    assert prune(clean_db, stream) == (8, "consumer 'early' at 8")

    with conn_of(clean_db) as conn:
        with pytest.raises(ConsumerNeedsRebuild, match="events through 8 are pruned"):
            consumers.report(conn, stream, "late", 3)
        # A second refusal keeps the first one's time and names the latest position.
        [first] = [c for c in sql.consumers(conn, stream) if c.consumer_id == "late"]
        with pytest.raises(ConsumerNeedsRebuild):
            consumers.report(conn, stream, "late", 4)
        [row] = [c for c in sql.consumers(conn, stream) if c.consumer_id == "late"]
        [state] = stream_report(conn, stream)
    assert row.reported_position is None and row.refused_position == 4
    assert row.needs_rebuild_since == first.needs_rebuild_since is not None
    [late] = [c for c in state.consumers if c.consumer_id == "late"]
    assert late.needs_rebuild_since is not None and late.refused_position == 4

    # The refused consumer holds what is still retained: nothing more is pruned, so
    # a rebuild can start from it.
    with conn_of(clean_db) as conn:
        consumers.report(conn, stream, "early", 12)
    assert prune(clean_db, stream) == (8, "consumer 'late' at 0")

    # The metric says which consumer of which stream needs a rebuild.
    gauge = _needs_rebuild(clean_db)
    assert gauge[("t1", "c1", "1", "late")] == 1 and gauge[("t1", "c1", "1", "early")] == 0

    # Rebuilt, it reports at or above the pruned position: accepted, the mark cleared.
    with conn_of(clean_db) as conn:
        assert consumers.report(conn, stream, "late", 9) == 9
        [row] = [c for c in sql.consumers(conn, stream) if c.consumer_id == "late"]
    assert (row.needs_rebuild_since, row.refused_position) == (None, None)
    assert _needs_rebuild(clean_db)[("t1", "c1", "1", "late")] == 0

    # A consumer that reported before may send a late, lower report: still ignored.
    with conn_of(clean_db) as conn:
        assert consumers.report(conn, stream, "late", 2) == 9


def _needs_rebuild(settings: DatabaseSettings) -> dict[tuple[str, ...], float]:
    collector = RetentionCollector(lambda: conn_of(settings))
    [family] = [
        m for m in collector.collect() if m.name == "gapless_retention_consumer_needs_rebuild"
    ]
    return {tuple(s.labels.values()): s.value for s in family.samples}


def test_the_api_refuses_a_first_report_below_pruned_through_with_its_code(
    clean_db: DatabaseSettings, client: TestClient
) -> None:
    stream = ready_stream(clean_db, n=6, published=6, old=6)
    assert prune(clean_db, stream) == (6, "publication")
    response = client.post("/v1/streams/t1/c1/1/consumers/late/progress", json={"position": 2})
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "CONSUMER_NEEDS_REBUILD" and "rebuild" in body["message"]
    state = client.get("/v1/streams/t1/c1/1").json()
    [late] = state["consumers"]
    assert (late["consumer_id"], late["refused_position"]) == ("late", 2)
    assert late["needs_rebuild_since"] is not None


def test_the_stream_list_is_paged_and_scoped_to_the_callers_tenants(
    clean_db: DatabaseSettings, client: TestClient
) -> None:
    for tenant, catalog in (("t1", "a"), ("t1", "b"), ("t2", "a"), ("t3", "a")):
        ready_stream(clean_db, n=3, published=2, old=0, tenant=tenant, catalog=catalog)
    seen: list[tuple[str, str]] = []
    params: dict[str, object] = {"limit": 2}
    while True:
        page = client.get("/v1/streams", params=params).json()
        seen += [(s["tenant_id"], s["catalog_id"]) for s in page["streams"]]
        if not page["more"]:
            break
        last = page["streams"][-1]
        params.update(
            after_tenant=last["tenant_id"],
            after_catalog=last["catalog_id"],
            after_epoch=last["history_epoch"],
        )
    assert seen == [("t1", "a"), ("t1", "b"), ("t3", "a")]  # this token: t1 and t3
    [first] = client.get("/v1/streams", params={"limit": 1}).json()["streams"]
    assert (first["committed_position"], first["published_position"]) == (3, 2)

    everyone = client.get("/v1/streams", headers=auth(ALL_TOKEN)).json()
    assert len(everyone["streams"]) == 4 and not everyone["more"]

    partial = client.get("/v1/streams", params={"after_tenant": "t1"})
    assert (partial.status_code, partial.json()["code"]) == (422, "INCOMPLETE_CURSOR")
