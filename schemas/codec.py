"""Events to bytes and back: Avro single-object encoding with fastavro.

Every message is ``C3 01`` + the writer schema's 8-byte CRC-64-AVRO fingerprint
(little-endian) + the schemaless Avro body, so it names its writer schema without
a registry. Decoding looks the fingerprint up among the current and every released
schema and resolves the body to the current schema, which is why
``schemas.compat`` insists each change stays readable.

Schemas are parsed once, when the codec is built: parsing is orders of magnitude
slower than encoding. Unions of records are written with the branch named as a
``(fullname, record)`` tuple, which spares fastavro trying each branch in turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, load_schema, to_parsing_canonical_form

from schemas import records
from schemas.events import Envelope, StreamKey
from schemas.exceptions import (
    BadMagic,
    CodecError,
    MalformedBody,
    Truncated,
    Unencodable,
    UnknownSchema,
)

AvroSchema = dict[str, Any] | list[Any] | str
"""A schema as fastavro represents it: JSON-shaped Python values."""

AVRO_DIR = Path(__file__).parent / "avro"
"""Current schemas, one ``<fullname>.avsc`` file per named type."""
RELEASES_SUBDIR = "released"
"""Under an Avro directory: one ``v<N>`` directory per release, holding that release's files."""

ENVELOPE = "gapless.catalog.Envelope"
STREAM_KEY = "gapless.catalog.StreamKey"
UPSERTED = "gapless.catalog.CatalogItemUpserted"
RETIRED = "gapless.catalog.CatalogItemRetired"
DECISION_RECORDED = "gapless.catalog.DecisionRecorded"
LISTING_MAPPED = "gapless.catalog.ListingMapped"
POLICY_VERSIONED = "gapless.catalog.ShippingPolicyVersioned"
ITEM_SPLIT = "gapless.catalog.CatalogItemSplit"
CLASS_DEFINED = "gapless.catalog.CatalogClassDefined"
ATTRIBUTE_DEFINED = "gapless.catalog.AttributeDefined"
ATTRIBUTE_VALUE_SET = "gapless.catalog.AttributeValueSet"

MAGIC = b"\xc3\x01"
HEADER_LENGTH = len(MAGIC) + 8

HEADER_EVENT_ID = "event_id"
HEADER_HISTORY_EPOCH = "history_epoch"
HEADER_TRACEPARENT = "traceparent"
"""W3C trace context of the write (or of the relay's span), when it was traced."""

KafkaHeaders = list[tuple[str, str | bytes | None]]
"""Message headers in the shape confluent-kafka's ``produce`` takes (ours are bytes)."""

_RELEASE_DIR_NAME = re.compile(r"v(\d+)")


def load_named_schema(fullname: str, directory: Path = AVRO_DIR) -> AvroSchema:
    """Parse ``<directory>/<fullname>.avsc`` and the named types it uses from the same directory."""
    schema: AvroSchema = load_schema(str(directory / f"{fullname}.avsc"))
    return schema


def release_dirs(avro_dir: Path = AVRO_DIR) -> list[tuple[str, Path]]:
    """``(version, directory)`` of every release under ``avro_dir``, oldest first."""
    root = avro_dir / RELEASES_SUBDIR
    if not root.is_dir():
        return []
    found = [
        (int(match.group(1)), path)
        for path in root.iterdir()
        if path.is_dir() and (match := _RELEASE_DIR_NAME.fullmatch(path.name))
    ]
    return [(path.name, path) for _, path in sorted(found)]


def schema_fingerprint(schema: AvroSchema) -> bytes:
    """The CRC-64-AVRO fingerprint of the schema's parsing canonical form, little-endian."""
    # fastavro renders the fingerprint as hex of the little-endian bytes, the same
    # byte order the single-object header uses.
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


class SingleObjectFormat:
    """Single-object framing for one record type and every released version of it."""

    def __init__(self, fullname: str, avro_dir: Path) -> None:
        self.fullname = fullname
        self.schema = load_named_schema(fullname, avro_dir)
        self.fingerprint = schema_fingerprint(self.schema)
        self._header = MAGIC + self.fingerprint
        self._writers: dict[bytes, AvroSchema] = {}
        for _version, directory in release_dirs(avro_dir):
            if (directory / f"{fullname}.avsc").is_file():
                released = load_named_schema(fullname, directory)
                self._writers[schema_fingerprint(released)] = released
        self._writers[self.fingerprint] = self.schema

    def encode(self, record: Mapping[str, Any]) -> bytes:
        out = BytesIO()
        out.write(self._header)
        try:
            schemaless_writer(out, self.schema, record)
        except Exception as exc:
            raise Unencodable(f"{self.fullname} cannot carry this value: {exc}") from exc
        return out.getvalue()

    def decode(self, data: bytes) -> Any:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise BadMagic(f"expected bytes, got {type(data).__name__}")
        if bytes(data[:2]) != MAGIC:
            if len(data) < len(MAGIC) and MAGIC.startswith(data):
                raise Truncated(f"{len(data)}-byte message")
            raise BadMagic(
                f"expected single-object marker c301, got {bytes(data[:2]).hex() or 'nothing'}",
            )
        if len(data) < HEADER_LENGTH:
            raise Truncated(f"{len(data)}-byte message")
        writer_fingerprint = bytes(data[2:HEADER_LENGTH])
        writer = self._writers.get(writer_fingerprint)
        if writer is None:
            raise UnknownSchema(
                f"fingerprint {writer_fingerprint.hex()} is no known {self.fullname} schema",
            )
        # Resolution is needed only for older writers; the current one reads as is.
        reader = None if writer is self.schema else self.schema
        body = BytesIO(data)
        body.seek(HEADER_LENGTH)
        try:
            record = schemaless_reader(body, writer, reader, return_record_name=True)
        except Exception as exc:
            raise MalformedBody(f"{self.fullname} body does not decode: {exc!r}") from exc
        if body.tell() != len(data):
            raise MalformedBody(
                f"{len(data) - body.tell()} bytes left after the {self.fullname} body",
            )
        return record


class EventCodec:
    """Encodes envelopes (Kafka values) and stream keys (Kafka keys), and decodes them.

    Build one per process and share it (``CODEC``); it holds no per-message state.
    ``avro_dir`` is for tests that need another set of current and released schemas.
    This one writes and reads the single-object framing only; with a schema registry
    configured, processes use ``schemas.registry_codec.RegistryCodec``, which writes
    the Confluent framing and reads both.
    """

    def __init__(self, avro_dir: Path = AVRO_DIR) -> None:
        self._value = SingleObjectFormat(ENVELOPE, avro_dir)
        self._key = SingleObjectFormat(STREAM_KEY, avro_dir)

    @property
    def value_schema(self) -> AvroSchema:
        """The current, parsed Envelope schema."""
        return self._value.schema

    @property
    def key_schema(self) -> AvroSchema:
        """The current, parsed StreamKey schema."""
        return self._key.schema

    def encode_value(self, envelope: Envelope) -> bytes:
        """The framed Avro bytes of ``envelope``; raises ``Unencodable``."""
        payload = records.BY_TYPE.get(type(envelope.payload))
        if payload is None:
            raise Unencodable(
                f"no schema for payload type {type(envelope.payload).__name__}",
            )
        return self._encode(
            self._value,
            {
                "tenant_id": envelope.tenant_id,
                "catalog_id": envelope.catalog_id,
                "history_epoch": envelope.history_epoch,
                "position": envelope.position,
                "event_id": envelope.event_id,
                "event_type": envelope.event_type,
                "aggregate": records.AGGREGATE.to_record(envelope.aggregate),
                "dependencies": [records.AGGREGATE.to_record(r) for r in envelope.dependencies],
                "occurred_at": envelope.occurred_at,
                # the union branch named: fastavro need not try each branch in turn
                "payload": (payload.fullname, payload.to_record(envelope.payload)),
            },
        )

    def decode_value(self, data: bytes) -> Envelope:
        """The envelope framed in ``data``; any unreadable input raises ``CodecError``."""
        record = self._decode(self._value, data)
        try:
            payload_name, payload_record = record["payload"]
            payload = records.BY_NAME[payload_name].from_record(payload_record)
            if record["event_type"] != payload.EVENT_TYPE:
                raise MalformedBody(
                    f"event_type {record['event_type']!r} disagrees with a "
                    f"{payload.EVENT_TYPE} payload",
                )
            return Envelope(
                tenant_id=record["tenant_id"],
                catalog_id=record["catalog_id"],
                history_epoch=record["history_epoch"],
                position=record["position"],
                event_id=record["event_id"],
                aggregate=records.AGGREGATE.from_record(record["aggregate"]),
                dependencies=tuple(
                    records.AGGREGATE.from_record(r) for r in record["dependencies"]
                ),
                occurred_at=record["occurred_at"],
                payload=payload,
            )
        except CodecError:
            raise
        except Exception as exc:
            raise MalformedBody(f"decoded envelope is not an event: {exc!r}") from exc

    def encode_key(self, key: StreamKey) -> bytes:
        """The framed Avro bytes of a stream key."""
        return self._encode(self._key, {"tenant_id": key.tenant_id, "catalog_id": key.catalog_id})

    def decode_key(self, data: bytes) -> StreamKey:
        """The stream key framed in ``data``; any unreadable input raises ``CodecError``."""
        record = self._decode(self._key, data)
        try:
            return StreamKey(tenant_id=record["tenant_id"], catalog_id=record["catalog_id"])
        except Exception as exc:
            raise MalformedBody(f"decoded key is not a stream key: {exc!r}") from exc

    def _encode(self, kind: SingleObjectFormat, record: Mapping[str, Any]) -> bytes:
        """The framed bytes of one record; ``schemas.registry_codec`` frames otherwise."""
        return kind.encode(record)

    def _decode(self, kind: SingleObjectFormat, data: bytes) -> Any:
        """The record framed in ``data``; ``schemas.registry_codec`` reads both framings."""
        return kind.decode(data)

    def headers(self, envelope: Envelope) -> KafkaHeaders:
        """Kafka headers: event_id and history_epoch as UTF-8 text."""
        return kafka_headers(str(envelope.event_id), envelope.history_epoch)


def kafka_headers(
    event_id: str, history_epoch: int, traceparent: str | None = None
) -> KafkaHeaders:
    """The Kafka headers of an event, from its event id (canonical UUID text) and epoch,
    and the W3C ``traceparent`` of the write when there is one.

    All are columns of the outbox row, so the relay builds the headers from them
    rather than storing (and parsing) them a second time.
    """
    headers: KafkaHeaders = [
        (HEADER_EVENT_ID, event_id.encode()),
        (HEADER_HISTORY_EPOCH, str(history_epoch).encode()),
    ]
    if traceparent is not None:
        headers.append((HEADER_TRACEPARENT, traceparent.encode()))
    return headers


CODEC = EventCodec()
"""The process-wide codec over the packaged schemas."""
