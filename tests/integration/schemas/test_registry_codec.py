"""The Confluent framing against the real schema registry (Apicurio, which ``gapless up``
runs): both framings decode to the same event, the registry's BACKWARD check refuses an
incompatible schema by subject, an unknown id is poison, and an unavailable registry is
a retryable error that writes nothing and quarantines nothing."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from psycopg_pool import ConnectionPool
from pydantic import SecretStr

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.processes import free_port
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from producers.api import create_app
from producers.resolver.review_cases import open_case
from producers.settings import ApiSettings
from schemas.codec import AVRO_DIR, CODEC, ENVELOPE, MAGIC
from schemas.events import AggregateRef, CatalogItemUpserted, Envelope, StreamKey
from schemas.exceptions import (
    CodecErrorCode,
    IncompatibleSchema,
    RegistryUnavailable,
    UnknownSchemaId,
)
from schemas.http.auth import token_hash
from schemas.registry_codec import (
    CONFLUENT_MAGIC,
    RegistryCodec,
    codec_for,
    registry_client,
    schema_json,
)
from schemas.settings import SchemaRegistrySettings
from schemas.topics import EVENTS_TOPIC
from tests.integration.producers.resolver.conftest import add_item
from tests.unit.schemas.test_codec import envelopes, stream_keys

TENANT, CATALOG = "registry", "c1"


def dead_registry() -> str:
    """A registry URL nothing answers on."""
    return f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"


@pytest.fixture(scope="module")
def writer(registry_url: str) -> RegistryCodec:
    return RegistryCodec(registry_client(registry_url))


def upsert(position: int, item: str) -> Envelope:
    return Envelope(
        tenant_id=TENANT,
        catalog_id=CATALOG,
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id=item, revision=1),
        dependencies=(),
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        payload=CatalogItemUpserted(class_id="lamp", status="active", title=item),
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(envelope=envelopes, key=stream_keys)
def test_both_framings_decode_to_the_same_event(
    writer: RegistryCodec, registry_url: str, envelope: Envelope, key: StreamKey
) -> None:
    confluent = writer.encode_value(envelope)
    assert confluent[:1] == CONFLUENT_MAGIC and writer.encode_key(key)[:1] == CONFLUENT_MAGIC
    single = CODEC.encode_value(envelope)
    assert single[:2] == MAGIC
    # A reader that has never seen the ids fetches the writer schema from the registry.
    reader = RegistryCodec(registry_client(registry_url))
    assert reader.decode_value(confluent) == envelope == reader.decode_value(single)
    assert (
        reader.decode_key(writer.encode_key(key)) == key == reader.decode_key(CODEC.encode_key(key))
    )


def test_the_writer_registers_its_subjects_with_backward_compatibility(
    writer: RegistryCodec, registry_url: str
) -> None:
    value = writer.encode_value(upsert(1, "i1"))
    with httpx.Client(base_url=registry_url) as http:
        for subject in ("gapless.catalog.Envelope", "gapless.catalog.StreamKey"):
            assert http.get(f"/config/{subject}").json()["compatibilityLevel"] == "BACKWARD"
        # The id the subject holds for this very schema (other tests of this registry,
        # earlier runs included, may have registered later versions of the subject).
        found = http.post(
            "/subjects/gapless.catalog.Envelope",
            json={"schema": schema_json(CODEC.value_schema), "schemaType": "AVRO"},
        )
    assert found.status_code == 200, found.text
    assert int.from_bytes(value[1:5], "big") == found.json()["id"]


def test_an_incompatible_schema_change_is_refused_naming_its_subject(
    writer: RegistryCodec, registry_url: str, tmp_path: Path
) -> None:
    writer.encode_value(upsert(1, "i1"))  # the subject holds the current schema
    changed = tmp_path / "avro"
    shutil.copytree(AVRO_DIR, changed)
    path = changed / f"{ENVELOPE}.avsc"
    schema = json.loads(path.read_text())
    # A new field without a default: the new schema cannot read the old events.
    schema["fields"].append({"name": "region", "type": "string"})
    path.write_text(json.dumps(schema))
    incompatible = RegistryCodec(registry_client(registry_url), changed)
    with pytest.raises(IncompatibleSchema) as refused:
        incompatible.encode_value(upsert(1, "i1"))
    assert refused.value.code == CodecErrorCode.INCOMPATIBLE_SCHEMA
    assert refused.value.subject == ENVELOPE and ENVELOPE in str(refused.value)


def test_an_unknown_schema_id_is_a_typed_error(writer: RegistryCodec) -> None:
    body = writer.encode_value(upsert(1, "i1"))[5:]
    with pytest.raises(UnknownSchemaId):
        writer.decode_value(CONFLUENT_MAGIC + (2**31 - 7).to_bytes(4, "big") + body)


def test_an_unreachable_registry_is_retryable_on_both_sides() -> None:
    codec = RegistryCodec(registry_client(dead_registry()))
    with pytest.raises(RegistryUnavailable) as writing:
        codec.encode_value(upsert(1, "i1"))
    assert writing.value.retryable and writing.value.code == "REGISTRY_UNAVAILABLE"
    with pytest.raises(RegistryUnavailable):
        codec.decode_value(CONFLUENT_MAGIC + (1).to_bytes(4, "big") + b"\x00")
    # The single-object framing needs no registry.
    event = upsert(1, "i1")
    assert codec.decode_value(CODEC.encode_value(event)) == event


def test_the_settings_choose_the_codec(registry_url: str) -> None:
    assert codec_for(SchemaRegistrySettings()) is CODEC
    chosen = codec_for(SchemaRegistrySettings(schema_registry_url=registry_url))
    assert isinstance(chosen, RegistryCodec)
    assert codec_for(SchemaRegistrySettings(schema_registry_url=registry_url)) is chosen


def message(offset: int, key: bytes, value: bytes) -> RawMessage:
    return RawMessage(EVENTS_TOPIC, 0, offset, key, value)


def items_and_quarantine(dsn: str) -> tuple[list[str], int]:
    with psycopg.connect(dsn) as conn:
        items = conn.execute(
            "SELECT item_id FROM product_item WHERE tenant_id = %s ORDER BY 1", (TENANT,)
        ).fetchall()
        quarantined = conn.execute("SELECT count(*) FROM quarantine").fetchone()
    assert quarantined is not None
    return [r[0] for r in items], int(quarantined[0])


def test_the_applier_reads_both_framings_and_retries_when_the_registry_is_down(
    clean_db: DatabaseSettings, writer: RegistryCodec, registry_url: str
) -> None:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    events = [upsert(p, f"i{p}") for p in (1, 2, 3, 4)]
    key = StreamKey(tenant_id=TENANT, catalog_id=CATALOG)
    down = Applier(
        clean_db.product_dsn,
        EpochSource(clean_db.control_dsn),
        RegistryCodec(registry_client(dead_registry())),
    )
    up = Applier(
        clean_db.product_dsn,
        EpochSource(clean_db.control_dsn),
        RegistryCodec(registry_client(registry_url)),
    )
    try:
        batch = [
            message(0, CODEC.encode_key(key), CODEC.encode_value(events[0])),
            message(1, writer.encode_key(key), writer.encode_value(events[1])),
            message(2, CODEC.encode_key(key), CODEC.encode_value(events[2])),
            message(3, writer.encode_key(key), writer.encode_value(events[3])),
        ]
        # The registry is down: the batch raises (delivered again), nothing is set aside.
        with pytest.raises(RegistryUnavailable):
            down.apply(batch)
        assert items_and_quarantine(clean_db.product_dsn) == ([], 0)
        result = up.apply(batch)
        assert (result.applied, result.quarantined) == (4, 0)
        assert items_and_quarantine(clean_db.product_dsn) == (["i1", "i2", "i3", "i4"], 0)
    finally:
        down.close()
        up.close()


T1_TOKEN = "token-of-tenant-t1"


def test_a_writer_with_the_registry_down_answers_503_and_writes_nothing(
    clean_db: DatabaseSettings,
) -> None:
    with ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True) as pool:
        epochs = EpochSource(clean_db.control_dsn)

        def uow() -> UnitOfWork:
            return UnitOfWork(pool, epochs, CODEC)

        add_item(uow, "i1")
        with uow() as u:
            open_case(u, "t1", "c1", "case-1", "listing", "L1")
            u.commit()
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        before = conn.execute(
            "SELECT (SELECT count(*) FROM outbox), (SELECT array_agg(position ORDER BY 1)"
            " FROM stream_cursor), (SELECT count(*) FROM decision)"
        ).fetchone()
    api_settings = ApiSettings(
        api_tokens=SecretStr(f"{token_hash(T1_TOKEN)}:t1"),
        resolver_dsn=clean_db.resolver_dsn,
        control_dsn=clean_db.control_dsn,
        schema_registry_url=dead_registry(),
    )
    decision = {
        "expected_revision": 1,
        "action": "accept",
        "actor": "reviewer:ana",
        "rationale": "the capture shows the same product",
        "evidence": [{"capture_id": "cap-1", "locator": "$.offers[0]"}],
        "facts": [{"kind": "map_listing", "listing_id": "L1", "item_id": "i1"}],
    }
    with TestClient(
        create_app(api_settings), headers={"Authorization": f"Bearer {T1_TOKEN}"}
    ) as client:
        response = client.post(
            "/v1/tenants/t1/catalogs/c1/review-cases/case-1/decisions", json=decision
        )
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "REGISTRY_UNAVAILABLE"
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        after = conn.execute(
            "SELECT (SELECT count(*) FROM outbox), (SELECT array_agg(position ORDER BY 1)"
            " FROM stream_cursor), (SELECT count(*) FROM decision)"
        ).fetchone()
    assert after == before
