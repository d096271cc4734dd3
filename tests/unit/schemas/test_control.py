"""Control commands round-trip through their Avro schema; other bytes are refused with
the codec's typed errors."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from schemas.control import (
    ControlCommand,
    RebuildStatus,
    decode,
    decode_status,
    encode,
    encode_status,
)
from schemas.exceptions import CodecError

AT = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize(
    "command",
    [
        ControlCommand(
            command_id=uuid.uuid4(),
            kind="rebuild",
            tenant_id="t/1",
            catalog_id="c1",
            requested_by="ops",
            reason="restore drill",
            requested_at=AT,
        ),
        ControlCommand(
            command_id=uuid.uuid4(),
            kind="cancel",
            tenant_id="t1",
            catalog_id="c1",
            consumer="product-applier",
            rebuild_id=uuid.uuid4(),
            requested_by="ops",
            reason="",
            requested_at=AT,
        ),
    ],
)
def test_commands_round_trip(command: ControlCommand) -> None:
    assert decode(encode(command)) == command
    assert command.key() == f"{command.tenant_id}/{command.catalog_id}".encode()


@pytest.mark.parametrize("data", [b"", b"{}", b"\xc3\x01" + bytes(8) + b"x"])
def test_other_bytes_are_refused_with_a_typed_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode(data)


def test_status_events_round_trip() -> None:
    status = RebuildStatus(
        rebuild_id=uuid.uuid4(),
        tenant_id="t1",
        catalog_id="c1",
        history_epoch=1,
        consumer="product-applier",
        phase="loading",
        attempt=2,
        generation=3,
        export_position=120,
        chunks_loaded=4,
        chunks_total=9,
        rows_loaded=80_000,
        error_code="LEASE_GONE",
        error_message="expired",
        at=AT,
    )
    assert decode_status(encode_status(status)) == status
