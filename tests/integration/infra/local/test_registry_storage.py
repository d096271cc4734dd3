"""The local schema registry forgets nothing: an event written in the Confluent framing
before the registry stops is read after it starts again, by a codec that never saw it,
and the schema keeps its id.

A registry of the test's own (the launcher ``gapless up`` uses, on free ports) keeps
its data in a fresh database of the tests' PostgreSQL, so the shared registry the other
tests use is never restarted. With the registry's in-memory storage this fails: the
id the message names is unknown after the restart.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from db.settings import DatabaseSettings
from infra.local import registry
from infra.local.layout import Layout, current_layout
from infra.local.postgres import SUPERUSER
from infra.processes import free_port
from schemas.events import AggregateRef, CatalogItemUpserted, Envelope
from schemas.registry_codec import RegistryCodec


@pytest.fixture
def own_registry(clean_db: DatabaseSettings, tmp_path: Path) -> Iterator[Layout]:
    """A registry launched on free ports, its storage a new database of the tests'
    PostgreSQL; stopped and the database dropped afterwards."""
    server = conninfo_to_dict(clean_db.resolver_dsn)
    host, port = str(server.get("host", "127.0.0.1")), int(str(server.get("port", 5432)))
    database = f"registry_test_{uuid.uuid4().hex[:8]}"
    owner = psycopg.connect(host=host, port=port, user=SUPERUSER, dbname="postgres")
    owner.autocommit = True
    owner.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    layout = Layout(
        local=tmp_path,
        pg_port=port,
        kafka_port=0,
        kafka_controller_port=0,
        s3_port=0,
        registry_port=free_port(),
        registry_management_port=free_port(),
        registry_database=database,
    )
    # The application unpacked once for the machine, not again for the test.
    app = registry.unpacked(current_layout(), print)
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / app.name).symlink_to(app)
    try:
        yield layout
    finally:
        registry.stop(layout, print)
        owner.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        owner.close()


def _event() -> Envelope:
    return Envelope(
        tenant_id="t",
        catalog_id="c",
        history_epoch=1,
        position=1,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id="item-1", revision=1),
        occurred_at=datetime.now(UTC),
        payload=CatalogItemUpserted(class_id="k", status="active", title="kept"),
    )


def test_schema_ids_survive_a_restart_of_the_registry(own_registry: Layout) -> None:
    registry.start(own_registry, print)
    before = RegistryCodec(SchemaRegistryClient({"url": registry.url(own_registry)}))
    event = _event()
    written = before.encode_value(event)
    assert written[0] == 0  # the Confluent framing: a zero byte, then the schema id
    schema_id = int.from_bytes(written[1:5], "big")

    registry.stop(own_registry, print)
    registry.start(own_registry, print)

    after = RegistryCodec(SchemaRegistryClient({"url": registry.url(own_registry)}))
    assert after.decode_value(written) == event
    assert int.from_bytes(after.encode_value(event)[1:5], "big") == schema_id
