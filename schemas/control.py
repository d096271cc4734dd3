"""Commands of the control topic (``catalog.control.v1``): what operators ask the
agents to do, and the rebuild status events the agents publish in return
(``catalog.rebuild-status.v1``); Avro in the same single-object framing as the events.

The Kafka key is ``<tenant>/<catalog>``, so the commands of one catalog stay in
order on one partition. ``command_id`` is the dedupe id: a command delivered twice
is carried out once (a REBUILD's id is the rebuild's id).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from schemas.codec import AVRO_DIR, SingleObjectFormat

COMMAND = "gapless.control.ControlCommand"
STATUS = "gapless.control.RebuildStatus"
Kind = Literal["rebuild", "cancel", "pause", "resume"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlCommand:
    command_id: uuid.UUID
    kind: Kind
    tenant_id: str
    catalog_id: str
    consumer: str | None = None
    rebuild_id: uuid.UUID | None = None
    requested_by: str
    reason: str
    requested_at: datetime

    def key(self) -> bytes:
        return f"{self.tenant_id}/{self.catalog_id}".encode()


_KINDS: dict[str, Kind] = {
    "REBUILD": "rebuild",
    "CANCEL": "cancel",
    "PAUSE": "pause",
    "RESUME": "resume",
}
_FORMAT = SingleObjectFormat(COMMAND, AVRO_DIR)
_STATUS_FORMAT = SingleObjectFormat(STATUS, AVRO_DIR)


def _format() -> SingleObjectFormat:
    return _FORMAT


def encode(command: ControlCommand) -> bytes:
    return _format().encode(
        {
            "command_id": str(command.command_id),
            "kind": command.kind.upper(),
            "tenant_id": command.tenant_id,
            "catalog_id": command.catalog_id,
            "consumer": command.consumer,
            "rebuild_id": None if command.rebuild_id is None else str(command.rebuild_id),
            "requested_by": command.requested_by,
            "reason": command.reason,
            "requested_at": command.requested_at,
        }
    )


def decode(data: bytes) -> ControlCommand:
    """The command in ``data``; raises the codec's typed errors for bytes that are
    not one (``BAD_MAGIC``, ``UNKNOWN_SCHEMA``, ``MALFORMED_BODY``…)."""
    record = _format().decode(data)
    at = record["requested_at"]
    return ControlCommand(
        command_id=uuid.UUID(str(record["command_id"])),
        kind=_KINDS[record["kind"]],
        tenant_id=record["tenant_id"],
        catalog_id=record["catalog_id"],
        consumer=record["consumer"],
        rebuild_id=None if record["rebuild_id"] is None else uuid.UUID(str(record["rebuild_id"])),
        requested_by=record["requested_by"],
        reason=record["reason"],
        requested_at=at if at.tzinfo else at.replace(tzinfo=UTC),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RebuildStatus:
    rebuild_id: uuid.UUID
    tenant_id: str
    catalog_id: str
    history_epoch: int
    consumer: str
    phase: str
    attempt: int
    generation: int | None = None
    export_position: int | None = None
    chunks_loaded: int
    chunks_total: int
    rows_loaded: int
    error_code: str | None = None
    error_message: str | None = None
    at: datetime
    target_position: int | None = None
    caught_up_position: int | None = None
    cutover_pause_ms: float | None = None

    def key(self) -> bytes:
        return f"{self.tenant_id}/{self.catalog_id}".encode()


def encode_status(status: RebuildStatus) -> bytes:
    record = {f: getattr(status, f) for f in RebuildStatus.__dataclass_fields__}
    record["rebuild_id"] = str(status.rebuild_id)
    return _STATUS_FORMAT.encode(record)


def decode_status(data: bytes) -> RebuildStatus:
    record = dict(_STATUS_FORMAT.decode(data))
    record["rebuild_id"] = uuid.UUID(str(record["rebuild_id"]))
    at = record["at"]
    record["at"] = at if at.tzinfo else at.replace(tzinfo=UTC)
    return RebuildStatus(**record)
