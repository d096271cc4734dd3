"""Both framings in one topic, end to end: writers put one stream's events through in
the single-object framing and in the Confluent framing (the real registry) by turns,
the relay process ships the bytes, and the agents process, with the registry
configured, applies every one of them."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.processes import Deployed, free_port
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC, MAGIC, EventCodec
from schemas.registry_codec import CONFLUENT_MAGIC, RegistryCodec, registry_client
from tests.fixtures.decisions import accept
from tests.fixtures.waits import wait_for

TENANT = "framings"
ROUNDS = 10  # each a rule decision and its item: 20 events per framing


def _processes(topic: str, registry_url: str, logs: Path) -> list[Deployed]:
    relay_port, agents_port = free_port(), free_port()
    env = dict(os.environ, GAPLESS_EVENTS_TOPIC=topic, GAPLESS_SCHEMA_REGISTRY_URL=registry_url)
    return [
        Deployed(
            "relay",
            ["relay"],
            {**env, "GAPLESS_RELAY_HTTP_PORT": str(relay_port)},
            logs / "relay.log",
            f"http://127.0.0.1:{relay_port}/readyz",
        ),
        Deployed(
            "agents",
            ["agents"],
            {
                **env,
                "GAPLESS_AGENTS_APP_ID": f"framings-{uuid.uuid4().hex[:8]}",
                "GAPLESS_AGENTS_WEB_PORT": str(agents_port),
            },
            logs / "agents.log",
            f"http://127.0.0.1:{agents_port}/readyz",
        ),
    ]


def _one(dsn: str, query: str, *params: object) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, params).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def test_the_agents_apply_events_written_in_either_framing(
    clean_db: DatabaseSettings, topic: str, registry_url: str, tmp_path: Path
) -> None:
    confluent = RegistryCodec(registry_client(registry_url))
    processes = _processes(topic, registry_url, tmp_path)
    with ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True) as pool:
        epochs = EpochSource(clean_db.control_dsn)
        try:
            for p in processes:
                p.start()
            for p in processes:
                p.wait_ready(90)
            for n in range(2 * ROUNDS):
                codec: EventCodec = confluent if n % 2 else CODEC
                with UnitOfWork(pool, epochs, codec) as uow:
                    accept(uow, TENANT, "c1", ItemChange(TENANT, "c1", f"i{n}", "lamp", f"l{n}"))
            with psycopg.connect(clean_db.resolver_dsn) as conn:
                rows = conn.execute(
                    "SELECT substring(value from 1 for 2), count(*) FROM outbox"
                    " WHERE tenant_id = %s GROUP BY 1",
                    (TENANT,),
                ).fetchall()
            framings = {bytes(prefix)[:1]: int(count) for prefix, count in rows}
            assert framings == {MAGIC[:1]: 2 * ROUNDS, CONFLUENT_MAGIC: 2 * ROUNDS}
            cursor = _one(
                clean_db.resolver_dsn,
                "SELECT position FROM stream_cursor WHERE tenant_id = %s",
                TENANT,
            )
            assert cursor == 4 * ROUNDS

            def progress() -> int:
                return _one(
                    clean_db.product_dsn,
                    "SELECT position FROM stream_progress WHERE tenant_id = %s",
                    TENANT,
                )

            wait_for(lambda: progress() == cursor, "the agents at the cursor", 90)
        finally:
            for p in reversed(processes):
                p.stop()
            epochs.close()
    logs = "\n".join(p.tail() for p in processes)
    items = _one(
        clean_db.product_dsn, "SELECT count(*) FROM product_item WHERE tenant_id = %s", TENANT
    )
    assert items == 2 * ROUNDS, logs
    quarantined = _one(clean_db.product_dsn, "SELECT count(*) FROM quarantine")
    assert quarantined == 0, logs
