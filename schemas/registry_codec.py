"""The Confluent wire format through a schema registry, beside the single-object framing.

A Confluent-framed message is ``00`` + the writer schema's 4-byte registry id
(big-endian) + the schemaless Avro body, the framing Kafka's own tools (and every
client with an Avro deserializer) read. ``RegistryCodec`` writes it and reads both
framings: a single-object message (``C3 01``) as ``EventCodec`` does, a Confluent one
by fetching the writer's schema by id from the registry (once per id) and resolving
the body to the current schema, so either decodes to the same event.

Subjects are named for the record (``gapless.catalog.Envelope``,
``gapless.catalog.StreamKey``: the record-name strategy), because the writer encodes
inside its transaction, before any topic is chosen. The first encode of each kind
sets the subject's compatibility to BACKWARD and registers the current schema; the
id is cached for the life of the codec. The registry's answers become typed errors:
unreachable or a 5xx is ``RegistryUnavailable`` (retryable, HTTP 503 through the
APIs), a refused schema ``IncompatibleSchema`` naming the subject, an id it does not
know ``UnknownSchemaId``.

Through ``confluent_kafka.schema_registry``'s client; the Avro work stays with
fastavro and the schemas parsed once in ``schemas.codec``.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Mapping
from functools import cache
from io import BytesIO
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from schemas.codec import (
    AVRO_DIR,
    CODEC,
    AvroSchema,
    EventCodec,
    SingleObjectFormat,
    schema_fingerprint,
)
from schemas.exceptions import (
    IncompatibleSchema,
    MalformedBody,
    RegistryUnavailable,
    Truncated,
    Unencodable,
    UnknownSchemaId,
)
from schemas.settings import SchemaRegistrySettings

CONFLUENT_MAGIC = b"\x00"
CONFLUENT_HEADER_LENGTH = 5
COMPATIBILITY = "BACKWARD"
_ID = struct.Struct(">I")
_NOT_FOUND = 404
_CONFLICT = 409
_UNPROCESSABLE = 422


def schema_json(schema: AvroSchema) -> str:
    """The schema as the JSON a registry stores: fastavro's parsing hints removed,
    documentation and defaults kept (the compatibility check needs the defaults)."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if not k.startswith("__")}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return json.dumps(clean(schema), separators=(",", ":"))


def _unavailable(what: str, exc: Exception) -> RegistryUnavailable:
    return RegistryUnavailable(f"schema registry unavailable while {what}: {exc}")


class RegistryCodec(EventCodec):
    """Writes the Confluent framing through a registry; reads it and the single-object one.

    ``client`` is any ``SchemaRegistryClient`` (its URL is the Confluent-compatible
    API's, ``…/apis/ccompat/v7`` on Apicurio). Thread-safe: the caches only grow, and
    a subject is registered under a lock so two threads do not both register it.
    """

    def __init__(self, client: SchemaRegistryClient, avro_dir: Path = AVRO_DIR) -> None:
        super().__init__(avro_dir)
        self._client = client
        self._ids: dict[str, int] = {}
        self._writers: dict[int, AvroSchema] = {}
        self._headers: dict[str, bytes] = {}  # framing of the current schemas, by name
        self._lock = threading.Lock()

    def schema_id(self, kind: SingleObjectFormat) -> int:
        """The registry id of the current schema of ``kind``, registered on first use."""
        found = self._ids.get(kind.fullname)
        if found is not None:
            return found
        # Serializes first registrations only (a cached id never takes it): two writer
        # threads would both register, and both set the subject's compatibility.
        with self._lock:
            found = self._ids.get(kind.fullname)
            if found is None:
                found = self._register(kind)
                self._ids[kind.fullname] = found
                self._writers[found] = kind.schema
        return found

    def _register(self, kind: SingleObjectFormat) -> int:
        subject = kind.fullname
        schema = Schema(schema_json(kind.schema), "AVRO")
        try:
            # Setting the level of a subject not yet registered is allowed on the
            # Confluent API (and Apicurio's); setting it first makes even the second
            # registration ever be checked.
            self._client.set_compatibility(subject_name=subject, level=COMPATIBILITY)
            return int(self._client.register_schema(subject, schema))
        except SchemaRegistryError as exc:
            if exc.http_status_code in (_CONFLICT, _UNPROCESSABLE):
                raise IncompatibleSchema(
                    subject,
                    f"subject {subject}: the registry refuses this schema as incompatible"
                    f" under {COMPATIBILITY}: {exc.error_message}",
                ) from exc
            raise _unavailable(f"registering {subject}", exc) from exc
        except Exception as exc:  # httpx's connection errors, timeouts
            raise _unavailable(f"registering {subject}", exc) from exc

    def _writer(self, schema_id: int, kind: SingleObjectFormat) -> AvroSchema:
        """The writer schema ``schema_id`` names, fetched once; the current schema
        itself when it is the same (a reader then skips schema resolution, which
        nearly doubles a decode: 35 against 20 µs an envelope here)."""
        found = self._writers.get(schema_id)
        if found is not None:
            return found
        try:
            registered = self._client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:
                raise UnknownSchemaId(f"schema id {schema_id} is not in the registry") from exc
            raise _unavailable(f"fetching schema {schema_id}", exc) from exc
        except Exception as exc:
            raise _unavailable(f"fetching schema {schema_id}", exc) from exc
        try:
            parsed: AvroSchema = parse_schema(json.loads(registered.schema_str or ""))
        except Exception as exc:
            raise UnknownSchemaId(f"schema id {schema_id} is no Avro schema: {exc}") from exc
        if schema_fingerprint(parsed) == schema_fingerprint(kind.schema):
            parsed = kind.schema
        self._writers[schema_id] = parsed
        return parsed

    def _encode(self, kind: SingleObjectFormat, record: Mapping[str, Any]) -> bytes:
        header = self._headers.get(kind.fullname)
        if header is None:
            header = self._headers[kind.fullname] = CONFLUENT_MAGIC + _ID.pack(self.schema_id(kind))
        out = BytesIO()
        out.write(header)
        try:
            schemaless_writer(out, kind.schema, record)
        except Exception as exc:
            raise Unencodable(f"{kind.fullname} cannot carry this value: {exc}") from exc
        return out.getvalue()

    def _decode(self, kind: SingleObjectFormat, data: bytes) -> Any:
        if not isinstance(data, bytes | bytearray | memoryview) or bytes(data[:1]) != (
            CONFLUENT_MAGIC
        ):
            return kind.decode(data)
        if len(data) < CONFLUENT_HEADER_LENGTH:
            raise Truncated(f"{len(data)}-byte Confluent-framed message")
        (schema_id,) = _ID.unpack(bytes(data[1:CONFLUENT_HEADER_LENGTH]))
        writer = self._writer(schema_id, kind)
        reader = None if writer is kind.schema else kind.schema
        body = BytesIO(data)
        body.seek(CONFLUENT_HEADER_LENGTH)
        try:
            record = schemaless_reader(body, writer, reader, return_record_name=True)
        except Exception as exc:
            raise MalformedBody(
                f"{kind.fullname} body does not decode under schema id {schema_id}: {exc!r}"
            ) from exc
        if body.tell() != len(data):
            raise MalformedBody(
                f"{len(data) - body.tell()} bytes left after the {kind.fullname} body",
            )
        return record


def registry_client(url: str, timeout_seconds: float = 5.0) -> SchemaRegistryClient:
    """A client of the Confluent-compatible API at ``url``, retrying briefly: a writer
    waits on it inside its transaction, so an outage must fail fast."""
    return SchemaRegistryClient(
        {
            "url": url,
            "timeout": timeout_seconds,
            "max.retries": 1,
            "retries.wait.ms": 100,
            "retries.max.wait.ms": 500,
        }
    )


@cache
def _registry_codec(url: str) -> RegistryCodec:
    return RegistryCodec(registry_client(url))


def codec_for(settings: SchemaRegistrySettings) -> EventCodec:
    """The process's codec: the Confluent framing through the configured registry, or
    the single-object ``CODEC`` when ``GAPLESS_SCHEMA_REGISTRY_URL`` is unset. One per
    URL per process (the caches are shared)."""
    if not settings.schema_registry_url:
        return CODEC
    return _registry_codec(settings.schema_registry_url)
