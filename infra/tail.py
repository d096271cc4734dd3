"""``gapless tail``: decode and follow the events topic, for people and programs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from schemas.events import CatalogItemRetired, CatalogItemUpserted, Envelope
from schemas.exceptions import CodecError
from schemas.registry_codec import codec_for
from schemas.settings import SchemaRegistrySettings


@dataclass(frozen=True, slots=True)
class TailFilter:
    tenant_id: str | None = None
    catalog_id: str | None = None
    event_type: str | None = None

    def matches(self, event: Envelope) -> bool:
        return (
            (self.tenant_id is None or event.tenant_id == self.tenant_id)
            and (self.catalog_id is None or event.catalog_id == self.catalog_id)
            and (self.event_type is None or event.event_type == self.event_type)
        )


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


def event_json(event: Envelope, partition: int, offset: int) -> dict[str, Any]:
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


def table_line(record: dict[str, Any]) -> str:
    a = record["aggregate"]
    return (
        f"{record['tenant_id']}/{record['catalog_id']}@{record['history_epoch']}"
        f" #{record['position']:<6} {record['event_type']:<22}"
        f" {a['type']}:{a['id']} r{a['revision']}"
        f"  (p{record['partition']} o{record['offset']})"
    )


def tail(
    bootstrap: str,
    topic: str,
    wanted: TailFilter,
    from_beginning: bool,
    follow: bool,
    limit: int | None,
    on_error: Callable[[int, int, CodecError], None],
) -> Iterator[dict[str, Any]]:
    """Yield decoded events; stop at the end of the topic unless ``follow``.

    Reads with a throwaway consumer group and commits nothing, so tailing never
    disturbs the agents' consumer group.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"gapless-tail-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    codec = codec_for(SchemaRegistrySettings())  # both framings when a registry is set
    try:
        partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in partitions])
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
            if wanted.matches(event):
                shown += 1
                yield event_json(event, partition, offset)
    finally:
        consumer.close()


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True)
