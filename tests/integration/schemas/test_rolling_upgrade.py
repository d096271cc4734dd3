"""A schema change during a rolling upgrade, through the real registry and PostgreSQL.

Release v3 gave the item events (``catalog_item.upserted`` and ``.retired``) an
optional ``decision_id``. While writers and agents are upgraded one by one, a stream
holds events of both releases, and a partition moves between agents of both. An
agent of release v2 is played by the applier with v2's schemas
(``schemas/avro/released/v2``): what differs between the releases for reading events
is the reader's schema, and v2's code reads a record without the field as a v3 code
reads an absent field.

Through the Confluent framing, each message names its writer's schema, so an old
agent resolves a new event to the schema it knows (the field dropped) and a new agent
resolves an old one to the current schema (the field absent): nothing is
quarantined, and every row is what the event said as far as the agent that applied
it could read. Through the single-object framing an old agent does not know a new
writer's fingerprint: the event is quarantined (``UNKNOWN_SCHEMA``) and applies once
retried by an upgraded agent, so readers go first there. A schema the registry's
history forbids is refused at the writer before anything is written.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.applier.repair import list_entries, retry
from schemas.codec import AVRO_DIR, ENVELOPE, EventCodec
from schemas.events import (
    AggregateRef,
    CatalogItemRetired,
    CatalogItemUpserted,
    Envelope,
    Payload,
)
from schemas.exceptions import IncompatibleSchema
from schemas.registry_codec import RegistryCodec
from schemas.topics import EVENTS_TOPIC

V2 = AVRO_DIR / "released" / "v2"
CATALOG = "c1"


@dataclass
class Stream:
    """One stream's events, handed out at consecutive positions and offsets."""

    tenant: str
    position: int = 0

    def event(self, item: str, revision: int, payload: Payload) -> Envelope:
        self.position += 1
        return Envelope(
            tenant_id=self.tenant,
            catalog_id=CATALOG,
            history_epoch=1,
            position=self.position,
            event_id=uuid.uuid4(),
            aggregate=AggregateRef(type="catalog_item", id=item, revision=revision),
            dependencies=(
                (AggregateRef(type="catalog_item", id=item, revision=revision - 1),)
                if revision > 1
                else ()
            ),
            occurred_at=datetime(2026, 12, 6, tzinfo=UTC),
            payload=payload,
        )


def _message(codec: EventCodec, event: Envelope) -> RawMessage:
    return RawMessage(
        EVENTS_TOPIC, 0, event.position - 1, codec.encode_key(event.key), codec.encode_value(event)
    )


def _rows(dsn: str, tenant: str) -> dict[str, tuple[str, str, uuid.UUID | None, int]]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT item_id, status, title, decision_id, revision FROM product_item"
            " WHERE tenant_id = %s",
            (tenant,),
        ).fetchall()
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in found}


@pytest.fixture()
def tenant(clean_db: DatabaseSettings) -> str:
    name = f"upgrade-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, name, CATALOG)
    return name


@pytest.fixture()
def epochs(clean_db: DatabaseSettings) -> Iterator[EpochSource]:
    source = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    yield source
    source.close()


def test_old_and_new_agents_apply_each_others_events_through_the_registry(
    clean_db: DatabaseSettings, registry_url: str, tenant: str, epochs: EpochSource
) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    old, new = RegistryCodec(client, V2), RegistryCodec(client)
    stream = Stream(tenant)
    decided = [uuid.uuid4() for _ in range(4)]
    # Writers mid-upgrade: an old one, then a new one, then the old one again.
    events = [
        (old, stream.event("a", 1, CatalogItemUpserted(class_id="k", status="active", title="A"))),
        (new, stream.event("b", 1, CatalogItemUpserted(class_id="k", status="active", title="B",
                                                        decision_id=decided[0]))),
        (new, stream.event("c", 1, CatalogItemUpserted(class_id="k", status="active", title="C",
                                                        decision_id=decided[1]))),
        (new, stream.event("a", 2, CatalogItemRetired(reason="gone", decision_id=decided[2]))),
        (old, stream.event("c", 2, CatalogItemRetired(reason="gone too"))),
        (new, stream.event("d", 1, CatalogItemUpserted(class_id="k", status="active", title="D",
                                                        decision_id=decided[3]))),
    ]  # fmt: skip
    messages = [_message(codec, event) for codec, event in events]
    # Two schemas of one subject, each message naming its writer's.
    ids = [int.from_bytes(m.value[1:5], "big") for m in messages if m.value]
    assert len(set(ids)) == 2 and all(m.value[:1] == b"\x00" for m in messages if m.value)
    # The partition is first an old agent's, which reads both releases' events...
    old_agent = Applier(clean_db.product_dsn, epochs, old, consumer="upgrade")
    try:
        old_agent.apply(messages[:3])
    finally:
        old_agent.close()
    # ...then, once upgraded, a new agent's (a redelivery of the last one included).
    new_agent = Applier(clean_db.product_dsn, epochs, new, consumer="upgrade")
    try:
        new_agent.apply(messages[2:])
    finally:
        new_agent.close()

    with psycopg.connect(clean_db.product_dsn) as conn:
        assert list_entries(conn) == []  # nothing quarantined, nothing parked for ever
    assert _rows(clean_db.product_dsn, tenant) == {
        # The old agent applied a and b (b's decision dropped: v2 has no such field)...
        # and c, whose retirement the new agent applied from an old writer's event.
        "b": ("active", "B", None, 1),
        "c": ("retired", "C", None, 2),
        # The new agent retired a with the new writer's decision, and created d.
        "a": ("retired", "A", decided[2], 2),
        "d": ("active", "D", decided[3], 1),
    }


def test_an_old_agent_quarantines_a_new_single_object_event_and_an_upgraded_one_applies_it(
    clean_db: DatabaseSettings, tenant: str, epochs: EpochSource
) -> None:
    old, new = EventCodec(V2), EventCodec()
    stream = Stream(tenant)
    decided = uuid.uuid4()
    first = stream.event("a", 1, CatalogItemUpserted(class_id="k", status="active", title="A"))
    second = stream.event(
        "b", 1, CatalogItemUpserted(class_id="k", status="active", title="B", decision_id=decided)
    )
    old_agent = Applier(clean_db.product_dsn, epochs, old, consumer="upgrade")
    try:
        old_agent.apply([_message(old, first), _message(new, second)])
    finally:
        old_agent.close()
    with psycopg.connect(clean_db.product_dsn) as conn:
        [entry] = list_entries(conn)
    assert entry.error_code == "UNKNOWN_SCHEMA"
    assert set(_rows(clean_db.product_dsn, tenant)) == {"a"}

    new_agent = Applier(clean_db.product_dsn, epochs, new, consumer="upgrade")
    try:
        assert retry(clean_db.product_dsn, new_agent, entry.id, "operator") is True
    finally:
        new_agent.close()
    assert _rows(clean_db.product_dsn, tenant)["b"] == ("active", "B", decided, 1)


def test_an_incompatible_change_is_refused_at_the_writer(registry_url: str, tmp_path: Path) -> None:
    """A required field added without a default cannot read what earlier writers
    wrote: the registry refuses it under BACKWARD, at the first encode, before a byte
    is produced (in the resolver, before its transaction writes an outbox row:
    ``tests/integration/schemas/test_registry_codec.py``)."""
    changed = tmp_path / "avro"
    changed.mkdir()
    for path in AVRO_DIR.glob("*.avsc"):
        (changed / path.name).write_text(path.read_text())
    upserted = changed / "gapless.catalog.CatalogItemUpserted.avsc"
    schema = json.loads(upserted.read_text())
    schema["fields"].append({"name": "brand", "type": "string"})
    upserted.write_text(json.dumps(schema))
    client = SchemaRegistryClient({"url": registry_url})
    stream = Stream("incompatible")
    event = stream.event("a", 1, CatalogItemUpserted(class_id="k", status="active", title="A"))
    RegistryCodec(client).encode_value(event)  # the current schema registered first
    with pytest.raises(IncompatibleSchema) as refused:
        RegistryCodec(client, changed).encode_value(event)
    assert ENVELOPE in str(refused.value)
