"""``gapless fence-epoch`` run again after its rebuild ended, against real PostgreSQL
and Kafka: a failed or cancelled fence rebuild is followed by a request with the next
derived id (never handed back for ever); once a rebuild is done the catalog resumes,
and the procedure run again after that, also when it held an operator's pause rather
than its own, pauses nothing and resumes no pause an operator opened since."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.product import rebuilds
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.cli.main import main
from infra.fence import rebuild_id_for
from processors.settings import AgentSettings
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC
from schemas.ids import StreamId
from schemas.settings import KafkaSettings
from tests.fixtures.decisions import accept
from tests.integration.infra.test_fence_epoch import CATALOG, TENANT, _commands


@pytest.fixture()
def control_topic(kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"test.control.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=30)
    monkeypatch.setenv("GAPLESS_CONTROL_TOPIC", name)
    yield name
    for future in admin.delete_topics([name]).values():
        future.result(timeout=30)


def _catalog(settings: DatabaseSettings) -> None:
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(settings.control_dsn)
    with UnitOfWork(pool, epochs, CODEC) as uow:
        accept(uow, TENANT, CATALOG, ItemChange(TENANT, CATALOG, "i1", "lamp", "lamp"))
    pool.close()
    epochs.close()


def _run(*args: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(main, [*args, "--json"])
    lines = result.stdout.strip().splitlines()
    return result.exit_code, json.loads(lines[-1]) if lines else {}


def _fence() -> tuple[int, dict[str, object]]:
    return _run(
        "fence-epoch", "--tenant", TENANT, "--catalog", CATALOG, "--epoch", "1", "--reason", "r"
    )


def _ended(settings: DatabaseSettings, rebuild_id: object, phase: str) -> None:
    """What the agents leave once the fence's rebuild ends in ``phase``."""
    rebuild_id = uuid.UUID(str(rebuild_id))
    consumer = AgentSettings().agents_consumer
    with psycopg.connect(settings.product_dsn) as conn:
        rebuilds.insert(
            conn,
            rebuild_id,
            consumer,
            StreamId(TENANT, CATALOG, 2),
            f"{consumer}~rebuild-{rebuild_id.hex[:12]}",
            "fence",
            "restored",
        )
        rebuilds.update(conn, rebuild_id, phase, error_code="X" if phase == "failed" else None)
        conn.commit()


def _pauses(settings: DatabaseSettings) -> list[tuple[uuid.UUID, bool]]:
    with psycopg.connect(settings.control_dsn) as conn:
        rows = conn.execute(
            "SELECT pause_id, resumed_at IS NULL FROM stream_pause ORDER BY paused_at"
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def test_a_failed_or_cancelled_fence_rebuild_is_followed_by_the_next_request(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, control_topic: str
) -> None:
    _catalog(clean_db)
    code, first = _fence()
    assert code == 3 and first["rebuild_id"] == str(rebuild_id_for(TENANT, CATALOG, 2))
    _ended(clean_db, first["rebuild_id"], "failed")
    code, failed = _fence()  # the failure is reported once, then asked again
    assert code == 3, failed
    assert failed["rebuild_id"] == str(rebuild_id_for(TENANT, CATALOG, 2, 1))
    assert failed["rebuild_phase"] is None and failed["state"] == "paused"
    _ended(clean_db, failed["rebuild_id"], "cancelled")
    code, cancelled = _fence()
    assert code == 3 and cancelled["rebuild_id"] == str(rebuild_id_for(TENANT, CATALOG, 2, 2))
    _ended(clean_db, cancelled["rebuild_id"], "done")
    code, done = _fence()
    assert code == 0 and done["state"] == "resumed", done
    assert done["rebuild_id"] == cancelled["rebuild_id"] and done["rebuild_phase"] == "done"
    code, again = _fence()  # complete: nothing more
    assert code == 0 and again["state"] == "resumed" and again["rebuild_phase"] == "done"
    commands = _commands(kafka_settings.kafka_bootstrap, control_topic, 5)
    assert [c.command_id for c in commands if c.kind == "rebuild"] == [
        rebuild_id_for(TENANT, CATALOG, 2, n) for n in (0, 1, 2)
    ]
    assert [c.kind for c in commands].count("resume") == 1
    assert _pauses(clean_db) == [(uuid.UUID(str(done["pause"]["pause_id"])), False)]  # type: ignore[index]


def test_run_again_after_it_resumed_an_operators_pause_it_opens_no_new_pause(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, control_topic: str
) -> None:
    _catalog(clean_db)
    # the runbook: the operator pauses before restoring, fences afterwards
    code, operator = _run("pause", "--tenant", TENANT, "--catalog", CATALOG, "--reason", "r")
    assert code == 0, operator
    code, first = _fence()
    assert code == 3 and first["pause"]["pause_id"] == operator["pause_id"]  # type: ignore[index]
    _ended(clean_db, first["rebuild_id"], "done")
    code, done = _fence()
    assert code == 0 and done["state"] == "resumed", done
    assert _pauses(clean_db) == [(uuid.UUID(str(operator["pause_id"])), False)]

    code, again = _fence()  # complete: no new pause of its own
    assert code == 0 and again["state"] == "resumed", again
    assert _pauses(clean_db) == [(uuid.UUID(str(operator["pause_id"])), False)]

    code, later = _run("pause", "--tenant", TENANT, "--catalog", CATALOG, "--reason", "other")
    assert code == 0, later
    code, again = _fence()  # an operator's pause opened since is left alone
    assert code == 0 and again["state"] == "resumed", again
    assert _pauses(clean_db)[-1] == (uuid.UUID(str(later["pause_id"])), True)
    assert len(_pauses(clean_db)) == 2
    commands = _commands(kafka_settings.kafka_bootstrap, control_topic, 4)
    assert [c.kind for c in commands] == ["pause", "rebuild", "resume", "pause"]
