"""A message the agents kept (a quarantine entry's, a parked event's) decoded for a
page, as ``gapless tail --json`` shows an event."""

from __future__ import annotations

from typing import Any

from infra.tail import event_json, message_headers, message_key
from schemas.codec import EventCodec, kafka_headers
from schemas.exceptions import CodecError


def decoded_message(
    codec: EventCodec,
    value: bytes | None,
    partition: int | None,
    offset: int | None,
    key: bytes | None = None,
) -> dict[str, Any]:
    """A kept message as ``gapless tail --json`` shows an event, with the headers the
    relay sends it with (what is kept is the value, and maybe the key, not the
    headers); or why it does not decode, with its first bytes."""
    if value is None:
        return {"record": None, "problem": "the message had no value", "head": ""}
    try:
        event = codec.decode_value(value)
    except CodecError as exc:
        return {"record": None, "problem": f"{exc.code}: {exc}", "head": value[:64].hex(" ")}
    record = event_json(
        event,
        -1 if partition is None else partition,
        -1 if offset is None else offset,
        key=message_key(key, codec),
        headers=message_headers(kafka_headers(str(event.event_id), event.history_epoch)),
    )
    record.pop("timestamp")
    return {"record": record, "problem": None, "head": ""}
