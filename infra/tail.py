"""``gapless tail``: decode and follow the events topic, for people and programs.

The reader assigns itself every partition of the topic and commits nothing: it never
joins a consumer group, so it cannot take partitions from the agents or move their
offsets. Where it starts is a ``Start``:

- ``beginning`` / ``end``: the oldest retained message / what arrives from now (each
  partition's end offset when the tail starts);
- a ``StreamPosition``: the first event of one stream (tenant and catalog) at or after
  that position; every partition is scanned from its oldest retained message until
  the stream's first such event is found, with progress on stderr, and shown from
  there on (a stream keeps to one partition, so the others only show other streams'
  events, which the tenant and catalog filters leave out);
- a ``datetime``: the first message each partition stored at or after it (Kafka's
  ``offsets_for_times``; a partition with none starts at its end).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from schemas.codec import CODEC, EventCodec
from schemas.events import CatalogItemRetired, CatalogItemUpserted, Envelope
from schemas.exceptions import CodecError
from schemas.registry_codec import codec_for
from schemas.settings import KafkaConnection, SchemaRegistrySettings, client_config

PROGRESS_EVERY_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class StreamPosition:
    """Start at the first event of the filtered stream at or after ``position``."""

    position: int


Start = Literal["beginning", "end"] | StreamPosition | datetime


def parse_start(text: str) -> Start:
    """``--from``: ``beginning``, ``end``, a stream position (digits) or an ISO 8601
    time (a time without a zone is UTC); ``ValueError`` for anything else."""
    word = text.strip()
    if word in ("beginning", "end"):
        return "beginning" if word == "beginning" else "end"
    if word.isdigit():
        return StreamPosition(int(word))
    try:
        moment = datetime.fromisoformat(word)
    except ValueError:
        raise ValueError(
            f"--from {text!r}: expected beginning, end, a stream position or an ISO 8601 time"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class TailFilter:
    tenant_id: str | None = None
    catalog_id: str | None = None
    event_type: str | None = None
    aggregate_type: str | None = None
    aggregate_id: str | None = None

    def matches(self, event: Envelope) -> bool:
        return (
            (self.tenant_id is None or event.tenant_id == self.tenant_id)
            and (self.catalog_id is None or event.catalog_id == self.catalog_id)
            and (self.event_type is None or event.event_type == self.event_type)
            and (self.aggregate_type is None or event.aggregate.type == self.aggregate_type)
            and (self.aggregate_id is None or event.aggregate.id == self.aggregate_id)
        )

    def same_stream(self, event: Envelope) -> bool:
        return event.tenant_id == self.tenant_id and event.catalog_id == self.catalog_id


def _plain(value: Any) -> Any:
    """A payload field as JSON-ready values (the newer payloads hold UUIDs, times,
    nested records and tuples)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    return value


def _text(data: str | bytes | None) -> str | None:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data


def message_key(data: bytes | None, codec: EventCodec = CODEC) -> str | None:
    """The Kafka key as ``tenant/catalog``, or its bytes as text when it is not a
    stream key."""
    if data is None:
        return None
    try:
        key = codec.decode_key(data)
    except CodecError:
        return _text(data)
    return f"{key.tenant_id}/{key.catalog_id}"


Headers = Mapping[str, str | bytes | None] | Sequence[tuple[str, str | bytes | None]]


def message_headers(headers: Headers | None) -> dict[str, str | None]:
    """The headers as text (a repeated name keeps its last value)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    return {name: _text(value) for name, value in pairs}


def event_json(
    event: Envelope,
    partition: int,
    offset: int,
    *,
    key: str | None = None,
    headers: Mapping[str, str | None] | None = None,
    timestamp: datetime | None = None,
) -> dict[str, Any]:
    payload = event.payload
    body: dict[str, Any]
    if isinstance(payload, CatalogItemUpserted):
        body = {
            "class_id": payload.class_id,
            "status": payload.status,
            "title": payload.title,
            "parent_item_id": payload.parent_item_id,
            "attributes": dict(payload.attributes),
        }
    elif isinstance(payload, CatalogItemRetired):
        body = {"reason": payload.reason}
    else:
        body = {f.name: _plain(getattr(payload, f.name)) for f in fields(payload)}
    return {
        "partition": partition,
        "offset": offset,
        "timestamp": timestamp.isoformat() if timestamp is not None else None,
        "key": key,
        "headers": dict(headers or {}),
        "tenant_id": event.tenant_id,
        "catalog_id": event.catalog_id,
        "history_epoch": event.history_epoch,
        "position": event.position,
        "event_id": str(event.event_id),
        "event_type": event.event_type,
        "aggregate": {
            "type": event.aggregate.type,
            "id": event.aggregate.id,
            "revision": event.aggregate.revision,
        },
        "dependencies": [
            {"type": d.type, "id": d.id, "revision": d.revision} for d in event.dependencies
        ],
        "occurred_at": event.occurred_at.isoformat(),
        "payload": body,
    }


# The table's columns: heading and width (a longer value widens its line, not the cut).
COLUMNS = (
    ("PART", 4),
    ("OFFSET", 8),
    ("STREAM", 24),
    ("POSITION", 8),
    ("TYPE", 26),
    ("AGGREGATE", 28),
    ("REV", 4),
    ("KEY", 20),
    ("HEADERS", 0),
)
RIGHT = frozenset({"PART", "OFFSET", "POSITION", "REV"})


def _row(values: Sequence[str]) -> str:
    cells = []
    for (name, width), value in zip(COLUMNS, values, strict=True):
        cells.append(value.rjust(width) if name in RIGHT else value.ljust(width))
    return "  ".join(cells).rstrip()


def table_header() -> str:
    return _row([name for name, _ in COLUMNS])


def table_line(record: dict[str, Any]) -> str:
    a = record["aggregate"]
    headers = record.get("headers") or {}
    return _row(
        [
            str(record["partition"]),
            str(record["offset"]),
            f"{record['tenant_id']}/{record['catalog_id']}@{record['history_epoch']}",
            str(record["position"]),
            record["event_type"],
            f"{a['type']}:{a['id']}",
            str(a["revision"]),
            record.get("key") or "-",
            " ".join(f"{k}={v}" for k, v in headers.items()) or "-",
        ]
    )


def _start_offsets(
    consumer: Consumer, topic: str, partitions: list[int], start: Start
) -> list[TopicPartition]:
    if isinstance(start, datetime):
        wanted = [TopicPartition(topic, p, int(start.timestamp() * 1000)) for p in partitions]
        found = consumer.offsets_for_times(wanted, timeout=10)
        # No message at or after the time: start at the end as it is now (the broker
        # would otherwise resolve "end" only at the first fetch).
        for tp in found:
            if tp.offset < 0:
                tp.offset = consumer.get_watermark_offsets(tp, timeout=10)[1]
        return list(found)
    if start == "end":
        # The end as it is now, so a message written after the start is shown even
        # when it arrives before the first fetch.
        ends = []
        for p in partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends.append(TopicPartition(topic, p, high))
        return ends
    return [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]


class _Seek:
    """The position search: which partitions still look for the stream's first event
    at or after the position, and a progress line every few seconds."""

    def __init__(
        self,
        consumer: Consumer,
        topic: str,
        partitions: list[int],
        target: StreamPosition | None,
        progress: Callable[[str], None],
    ) -> None:
        self.target = target
        self.seeking = set(partitions) if target is not None else set()
        self._consumer = consumer
        self._topic = topic
        self._progress = progress
        self._last = time.monotonic()
        self._at: dict[int, int] = {}

    def passes(self, partition: int, offset: int, event: Envelope, wanted: TailFilter) -> bool:
        """Whether ``event`` is past the start (found or after it)."""
        if partition not in self.seeking or self.target is None:
            return True
        self._at[partition] = offset
        if wanted.same_stream(event) and event.position >= self.target.position:
            self.seeking.discard(partition)
            self._progress(
                f"found position {event.position} of {event.tenant_id}/{event.catalog_id}"
                f" in partition {partition} at offset {offset}"
            )
            return True
        self._report()
        return False

    def reached_end(self, partition: int) -> None:
        """A partition read to its end without the position: whatever comes next is new."""
        if partition in self.seeking and self.target is not None:
            self.seeking.discard(partition)
            self._progress(
                f"partition {partition} read to its end: no event of the stream at or"
                f" after position {self.target.position}"
            )

    def _report(self) -> None:
        now = time.monotonic()
        if now - self._last < PROGRESS_EVERY_SECONDS:
            return
        self._last = now
        parts = []
        for p in sorted(self.seeking):
            high = self._consumer.get_watermark_offsets(
                TopicPartition(self._topic, p), timeout=5, cached=True
            )
            parts.append(f"p{p} {self._at.get(p, 0)}/{high[1] if high else '?'}")
        self._progress(
            f"seeking position {self.target.position if self.target else 0}: " + ", ".join(parts)
        )


def _reader(kafka: KafkaConnection) -> Consumer:
    """A consumer that joins no group and commits nothing (the group id is a throwaway
    librdkafka needs), and reports each partition's end."""
    return Consumer(
        client_config(
            kafka,
            {
                "group.id": f"gapless-tail-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
            },
        )
    )


def _assign(
    consumer: Consumer, topic: str, start: Start, progress: Callable[[str], None]
) -> list[int]:
    """Every partition of ``topic`` assigned at its ``start`` offset (said on
    ``progress`` for the end and a time); returns the partitions."""
    described = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if described is None or described.error is not None:
        raise RuntimeError(f"topic {topic} not found: {described.error if described else ''}")
    partitions = sorted(described.partitions)
    assigned = _start_offsets(consumer, topic, partitions, start)
    if not isinstance(start, StreamPosition) and start != "beginning":
        since = "the end" if start == "end" else start.isoformat()
        progress(
            f"from {since}: " + ", ".join(f"p{tp.partition} offset {tp.offset}" for tp in assigned)
        )
    consumer.assign(assigned)
    return partitions


def tail(
    kafka: KafkaConnection,
    topic: str,
    wanted: TailFilter,
    start: Start,
    follow: bool,
    limit: int | None,
    on_error: Callable[[int, int, CodecError], None],
    progress: Callable[[str], None] = lambda _: None,
    codec: EventCodec | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield decoded events from ``start`` on; stop at the end of the topic unless
    ``follow``. ``codec`` defaults to the one the settings choose: both framings when
    GAPLESS_SCHEMA_REGISTRY_URL is set (``schemas.registry_codec.codec_for``).

    Assigns the partitions directly and commits nothing (the group id is a throwaway
    librdkafka needs, never joined), so tailing never disturbs the agents' group.
    ``kafka`` carries the security settings (``KafkaSettings.client_config()``): a
    read-only principal is enough.
    """
    if isinstance(start, StreamPosition) and (
        wanted.tenant_id is None or wanted.catalog_id is None
    ):
        raise ValueError("a stream position needs the tenant and the catalog")
    if codec is None:
        codec = codec_for(SchemaRegistrySettings())
    consumer = _reader(kafka)
    try:
        partitions = _assign(consumer, topic, start, progress)
        seek = _Seek(
            consumer,
            topic,
            partitions,
            start if isinstance(start, StreamPosition) else None,
            progress,
        )
        at_end: set[int] = set()
        shown = 0
        while limit is None or shown < limit:
            message = consumer.poll(0.5)
            if message is None:
                if not follow and len(at_end) == len(partitions):
                    return
                continue
            partition, offset = message.partition() or 0, message.offset() or 0
            error = message.error()
            if error is not None:
                if error.code() == error._PARTITION_EOF:
                    at_end.add(partition)
                    seek.reached_end(partition)
                    if not follow and len(at_end) == len(partitions):
                        return
                    continue
                raise RuntimeError(f"Kafka error while tailing {topic}: {error}")
            at_end.discard(partition)
            try:
                event = codec.decode_value(message.value() or b"")
            except CodecError as exc:
                on_error(partition, offset, exc)
                continue
            if seek.passes(partition, offset, event, wanted) and wanted.matches(event):
                shown += 1
                yield _record(event, message, codec)
    finally:
        consumer.close()


def _record(event: Envelope, message: Message, codec: EventCodec) -> dict[str, Any]:
    kind, ms = message.timestamp()
    stamp = datetime.fromtimestamp(ms / 1000, UTC) if kind and ms >= 0 else None
    return event_json(
        event,
        message.partition() or 0,
        message.offset() or 0,
        key=message_key(message.key(), codec),
        headers=message_headers(message.headers()),
        timestamp=stamp,
    )


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True)
