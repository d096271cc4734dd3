"""EventCodec: round trips, framing, errors, and reading older writer schemas."""

from __future__ import annotations

import contextlib
import json
import pickle
import shutil
import uuid
from datetime import UTC, datetime, timedelta, timezone
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from schemas.codec import (
    AVRO_DIR,
    CODEC,
    ENVELOPE,
    HEADER_LENGTH,
    MAGIC,
    UPSERTED,
    EventCodec,
    kafka_headers,
    schema_fingerprint,
)
from schemas.events import (
    PAYLOAD_TYPES,
    AggregateRef,
    AttributeDefined,
    AttributeValueSet,
    CatalogClassDefined,
    CatalogItemRetired,
    CatalogItemSplit,
    CatalogItemUpserted,
    DecisionRecorded,
    Envelope,
    EvidenceRef,
    ListingMapped,
    ShippingPolicyVersioned,
    StreamKey,
)
from schemas.exceptions import CodecError, CodecErrorCode, UnknownSchema

LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text()
UTC_TIMES = st.datetimes(timezones=st.just(UTC))

aggregate_refs = st.builds(AggregateRef, type=TEXT, id=TEXT, revision=LONGS)
PAYLOAD_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    CatalogItemUpserted: st.builds(
        CatalogItemUpserted,
        class_id=TEXT,
        status=TEXT,
        title=TEXT,
        parent_item_id=st.none() | TEXT,
        attributes=st.dictionaries(TEXT, TEXT, max_size=8),
        decision_id=st.none() | st.uuids(),
    ),
    CatalogItemRetired: st.builds(
        CatalogItemRetired, reason=TEXT, decision_id=st.none() | st.uuids()
    ),
    DecisionRecorded: st.builds(
        DecisionRecorded,
        action=TEXT,
        actor=TEXT,
        actor_kind=TEXT,
        rationale=TEXT,
        evidence=st.lists(st.builds(EvidenceRef, capture_id=TEXT, locator=TEXT), max_size=4).map(
            tuple
        ),
        prior_decision_ids=st.lists(st.uuids(), max_size=3).map(tuple),
        case_id=st.none() | TEXT,
        case_revision=st.none() | LONGS,
    ),
    ListingMapped: st.builds(
        ListingMapped, item_id=TEXT, item_revision=LONGS, decision_id=st.uuids()
    ),
    ShippingPolicyVersioned: st.builds(
        ShippingPolicyVersioned,
        scope=TEXT,
        effective_from=UTC_TIMES,
        effective_to=st.none() | UTC_TIMES,
        terms=st.dictionaries(TEXT, TEXT, max_size=4),
        decision_id=st.uuids(),
    ),
    CatalogItemSplit: st.builds(
        CatalogItemSplit,
        source_item_id=TEXT,
        source_revision=LONGS,
        successor_item_ids=st.lists(TEXT, max_size=4).map(tuple),
        remaps=st.dictionaries(TEXT, TEXT, max_size=4),
        decision_id=st.uuids(),
    ),
    CatalogClassDefined: st.builds(
        CatalogClassDefined, parent_class_id=st.none() | TEXT, decision_id=st.uuids()
    ),
    AttributeDefined: st.builds(
        AttributeDefined,
        attribute_key=TEXT,
        version=LONGS,
        label=TEXT,
        value_type=TEXT,
        allowed_values=st.lists(TEXT, max_size=4).map(tuple),
        applies_to=st.lists(TEXT, max_size=4).map(tuple),
        status=TEXT,
        decision_id=st.uuids(),
    ),
    AttributeValueSet: st.builds(
        AttributeValueSet,
        item_id=TEXT,
        item_revision=LONGS,
        attribute_key=TEXT,
        definition_version=LONGS,
        value_type=TEXT,
        value=TEXT,
        decision_id=st.uuids(),
    ),
}
payloads = st.one_of(*PAYLOAD_STRATEGIES.values())
envelopes = st.builds(
    Envelope,
    tenant_id=TEXT,
    catalog_id=TEXT,
    history_epoch=LONGS,
    position=LONGS,
    event_id=st.uuids(),
    aggregate=aggregate_refs,
    dependencies=st.lists(aggregate_refs, max_size=5).map(tuple),
    occurred_at=st.datetimes(timezones=st.just(UTC)),
    payload=payloads,
)
stream_keys = st.builds(StreamKey, tenant_id=TEXT, catalog_id=TEXT)


def an_envelope(**changes: Any) -> Envelope:
    fields: dict[str, Any] = {
        "tenant_id": "tenant-1",
        "catalog_id": "catalog-1",
        "history_epoch": 2,
        "position": 41,
        "event_id": uuid.UUID("3f1c2a9e-7d4b-4c8e-9a51-0b6f2d7e8c13"),
        "aggregate": AggregateRef(type="catalog_item", id="item-7", revision=4),
        "dependencies": (AggregateRef(type="class", id="class-1", revision=1),),
        "occurred_at": datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC),
        "payload": CatalogItemUpserted(
            class_id="class-1", status="active", title="Lamp", attributes={"colour": "red"}
        ),
    }
    fields.update(changes)
    return Envelope(**fields)


def expect_code(code: CodecErrorCode, data: bytes, decode: Any = CODEC.decode_value) -> None:
    with pytest.raises(CodecError) as caught:
        decode(data)
    assert caught.value.code is code


def write_with_plain_strings(record: dict[str, Any]) -> bytes:
    """Frame ``record`` under the current fingerprint, bypassing the UUID logical type.

    The parsing canonical form drops logical types, so the fingerprint is unchanged:
    this is how a buggy or hostile writer could put any string in ``event_id``.
    """
    schema = json.loads(json.dumps(CODEC.value_schema))
    for field in schema["fields"]:
        if field["name"] == "event_id":
            field["type"] = "string"
    schema = {k: v for k, v in schema.items() if not k.startswith("__")}
    out = BytesIO()
    out.write(MAGIC + schema_fingerprint(schema))
    schemaless_writer(out, parse_schema(schema), record)
    return out.getvalue()


def plain_record(envelope: Envelope, **changes: Any) -> dict[str, Any]:
    assert isinstance(envelope.payload, CatalogItemUpserted)
    record: dict[str, Any] = {
        "tenant_id": envelope.tenant_id,
        "catalog_id": envelope.catalog_id,
        "history_epoch": envelope.history_epoch,
        "position": envelope.position,
        "event_id": str(envelope.event_id),
        "event_type": envelope.event_type,
        "aggregate": {"type": "catalog_item", "id": "item-7", "revision": 4},
        "dependencies": [],
        "occurred_at": envelope.occurred_at,
        "payload": (UPSERTED, {"class_id": "c", "status": "s", "title": "t", "attributes": {}}),
    }
    record.update(changes)
    return record


# --- round trips -------------------------------------------------------------


@given(envelopes)
def test_any_envelope_round_trips(envelope: Envelope) -> None:
    assert CODEC.decode_value(CODEC.encode_value(envelope)) == envelope


@given(stream_keys)
def test_any_key_round_trips(key: StreamKey) -> None:
    assert CODEC.decode_key(CODEC.encode_key(key)) == key


def test_decoded_envelope_keeps_types_and_time_zone() -> None:
    decoded = CODEC.decode_value(CODEC.encode_value(an_envelope()))
    assert decoded.occurred_at.tzinfo is UTC
    assert isinstance(decoded.event_id, uuid.UUID)
    assert isinstance(decoded.dependencies, tuple)
    assert decoded.event_type == "catalog_item.upserted"


def test_every_payload_type_is_in_the_round_trip_strategy() -> None:
    assert set(PAYLOAD_STRATEGIES) == set(PAYLOAD_TYPES.values())


def test_retired_payload_round_trips_with_its_event_type() -> None:
    envelope = an_envelope(payload=CatalogItemRetired(reason="discontinued"), dependencies=())
    decoded = CODEC.decode_value(CODEC.encode_value(envelope))
    assert decoded == envelope
    assert decoded.event_type == "catalog_item.retired"


# --- framing -------------------------------------------------------------------


def test_fingerprint_is_crc64_avro_little_endian() -> None:
    # The Avro specification's CRC-64-AVRO of the schema "int" is 0x7275d51a3f395c8f;
    # single-object encoding stores it little-endian.
    assert schema_fingerprint("int") == bytes.fromhex("8f5c393f1ad57572")


def test_value_and_key_use_single_object_framing() -> None:
    value = CODEC.encode_value(an_envelope())
    key = CODEC.encode_key(StreamKey(tenant_id="t", catalog_id="c"))
    assert value[:2] == key[:2] == b"\xc3\x01"
    assert value[2:HEADER_LENGTH] == schema_fingerprint(CODEC.value_schema)
    assert key[2:HEADER_LENGTH] == schema_fingerprint(CODEC.key_schema)


def test_headers_carry_event_id_and_history_epoch_as_text() -> None:
    envelope = an_envelope()
    assert CODEC.headers(envelope) == [
        ("event_id", b"3f1c2a9e-7d4b-4c8e-9a51-0b6f2d7e8c13"),
        ("history_epoch", b"2"),
    ]


def test_envelope_stream_and_key() -> None:
    envelope = an_envelope()
    assert envelope.stream == ("tenant-1", "catalog-1", 2)
    assert envelope.key == StreamKey(tenant_id="tenant-1", catalog_id="catalog-1")


# --- malformed input raises CodecError and nothing else --------------------------


@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_codec_error(data: bytes) -> None:
    for decode in (CODEC.decode_value, CODEC.decode_key):
        with contextlib.suppress(CodecError):
            decode(data)


@given(st.binary(max_size=300))
def test_arbitrary_body_behind_a_valid_header_raises_only_codec_error(body: bytes) -> None:
    header = MAGIC + schema_fingerprint(CODEC.value_schema)
    with contextlib.suppress(CodecError):
        CODEC.decode_value(header + body)


@given(envelopes, st.data())
def test_every_truncation_or_extension_is_rejected(envelope: Envelope, data: st.DataObject) -> None:
    encoded = CODEC.encode_value(envelope)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(CodecError):
        CODEC.decode_value(encoded[:cut])
    with pytest.raises(CodecError) as caught:
        CODEC.decode_value(encoded + data.draw(st.binary(min_size=1, max_size=8)))
    assert caught.value.code is CodecErrorCode.MALFORMED_BODY


def test_wrong_magic() -> None:
    encoded = CODEC.encode_value(an_envelope())
    expect_code(CodecErrorCode.BAD_MAGIC, b"\x00" + encoded[1:])
    expect_code(CodecErrorCode.BAD_MAGIC, None)  # type: ignore[arg-type]  # a Kafka tombstone


def test_truncated_header() -> None:
    encoded = CODEC.encode_value(an_envelope())
    expect_code(CodecErrorCode.TRUNCATED, b"")
    expect_code(CodecErrorCode.TRUNCATED, encoded[:1])
    expect_code(CodecErrorCode.TRUNCATED, encoded[:9])


def test_unknown_fingerprint() -> None:
    encoded = CODEC.encode_value(an_envelope())
    expect_code(CodecErrorCode.UNKNOWN_SCHEMA, MAGIC + b"\x00" * 8 + encoded[HEADER_LENGTH:])


def test_key_and_value_are_not_interchangeable() -> None:
    key = CODEC.encode_key(StreamKey(tenant_id="t", catalog_id="c"))
    expect_code(CodecErrorCode.UNKNOWN_SCHEMA, key)
    expect_code(CodecErrorCode.UNKNOWN_SCHEMA, CODEC.encode_value(an_envelope()), CODEC.decode_key)


def test_invalid_uuid_is_a_malformed_body() -> None:
    data = write_with_plain_strings(plain_record(an_envelope(), event_id="not-a-uuid"))
    expect_code(CodecErrorCode.MALFORMED_BODY, data)


def test_event_type_must_agree_with_payload() -> None:
    envelope = an_envelope()
    assert CODEC.decode_value(write_with_plain_strings(plain_record(envelope))).position == 41
    data = write_with_plain_strings(plain_record(envelope, event_type="catalog_item.retired"))
    expect_code(CodecErrorCode.MALFORMED_BODY, data)


def test_out_of_range_long_is_unencodable() -> None:
    with pytest.raises(CodecError) as caught:
        CODEC.encode_value(an_envelope(position=2**63))
    assert caught.value.code is CodecErrorCode.UNENCODABLE


def test_codec_error_pickles_with_its_code() -> None:
    error = UnknownSchema("fingerprint 00")
    restored = pickle.loads(pickle.dumps(error))
    assert restored.code is CodecErrorCode.UNKNOWN_SCHEMA
    assert str(restored) == "UNKNOWN_SCHEMA: fingerprint 00"


# --- events -------------------------------------------------------------------


def test_naive_occurred_at_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        an_envelope(occurred_at=datetime(2026, 1, 1))


def test_occurred_at_is_kept_in_utc() -> None:
    paris = timezone(timedelta(hours=1))
    envelope = an_envelope(occurred_at=datetime(2026, 1, 1, 13, tzinfo=paris))
    assert envelope.occurred_at == datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert envelope.occurred_at.tzinfo is UTC


def test_attributes_cannot_change_after_construction() -> None:
    attributes = {"colour": "red"}
    payload = CatalogItemUpserted(class_id="c", status="s", title="t", attributes=attributes)
    attributes["colour"] = "blue"
    assert payload.attributes == {"colour": "red"}
    with pytest.raises(TypeError):
        payload.attributes["colour"] = "blue"  # type: ignore[index]


# --- schema evolution -----------------------------------------------------------


def test_reads_messages_written_with_a_released_schema(tmp_path: Path) -> None:
    """A newer codec (a field added with a default) decodes what today's codec wrote."""
    evolved = tmp_path / "avro"
    shutil.copytree(AVRO_DIR, evolved)
    shutil.rmtree(evolved / "released")
    shutil.copytree(
        AVRO_DIR, evolved / "released" / "v1", ignore=shutil.ignore_patterns("released")
    )
    envelope_path = evolved / f"{ENVELOPE}.avsc"
    schema = json.loads(envelope_path.read_text())
    schema["fields"].append({"name": "source", "type": "string", "default": "unknown"})
    envelope_path.write_text(json.dumps(schema))
    newer = EventCodec(evolved)

    envelope = an_envelope()
    written_today = CODEC.encode_value(envelope)
    assert newer.decode_value(written_today) == envelope
    # And the newer codec writes under a fingerprint today's codec has never seen.
    expect_code(CodecErrorCode.UNKNOWN_SCHEMA, newer.encode_value(envelope))


def test_kafka_headers_from_columns_equal_the_envelope_headers() -> None:
    envelope = an_envelope()
    assert kafka_headers(str(envelope.event_id), envelope.history_epoch) == CODEC.headers(envelope)


def test_release_v3_reads_what_release_v2_wrote_and_v2_knows_v3_only_by_fingerprint() -> None:
    """Release v3 added the item events' optional ``decision_id``. Today's codec reads
    an item event written with the v2 schemas (it comes back absent); a reader of v2's
    schemas alone reads v2's bytes, but finds no v3 writer among its schemas: through
    the single-object framing an agent not yet upgraded quarantines what an upgraded
    writer wrote (the registry's framing names the writer's schema; see
    ``tests/integration/schemas/test_rolling_upgrade.py``)."""
    v2 = EventCodec(AVRO_DIR / "released" / "v2")
    decided = uuid.uuid4()
    envelope = an_envelope(
        payload=CatalogItemUpserted(class_id="k", status="active", title="t", decision_id=decided)
    )
    written_by_v2 = v2.encode_value(envelope)
    assert CODEC.decode_value(written_by_v2) == an_envelope(
        payload=CatalogItemUpserted(class_id="k", status="active", title="t")
    )
    assert v2.decode_value(written_by_v2).payload.decision_id is None  # type: ignore[union-attr]
    assert CODEC.decode_value(CODEC.encode_value(envelope)).payload.decision_id == decided  # type: ignore[union-attr]
    with pytest.raises(UnknownSchema):
        v2.decode_value(CODEC.encode_value(envelope))
