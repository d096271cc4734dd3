"""The export chunk framing and the manifest: what is written reads back, and any
change to the bytes is refused with ``EXPORT_CORRUPT``."""

from __future__ import annotations

import pytest

from schemas.exports import (
    ChunkEntry,
    ExportCorrupt,
    Manifest,
    chunk_key,
    frame,
    manifest_key,
    sha256,
    unframe,
)
from schemas.ids import StreamId

RECORDS = [b"", b"a", b"\x00" * 300, bytes(range(256))]


def test_records_read_back_in_order() -> None:
    data = frame(RECORDS)
    assert list(unframe(data, sha256(data))) == RECORDS
    empty = frame([])
    assert list(unframe(empty, sha256(empty))) == []


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d[:-1], "truncated in a record"),
        (lambda d: d[:-258], "truncated in a record length"),
        (lambda d: b"XXXX" + d[4:], "magic"),
    ],
)
def test_damaged_chunks_are_refused(damage, message) -> None:  # type: ignore[no-untyped-def]
    bad = damage(frame(RECORDS))
    with pytest.raises(ExportCorrupt, match="checksum"):
        list(unframe(bad, sha256(frame(RECORDS))))
    with pytest.raises(ExportCorrupt, match=message):
        list(unframe(bad, sha256(bad)))  # even with a matching checksum


def test_the_manifest_round_trips_and_its_checksum_is_checked() -> None:
    stream = StreamId("t/1", "c 1", 3)
    export_id = "0f0e"
    manifest = Manifest(
        export_id=export_id,
        tenant_id=stream.tenant_id,
        catalog_id=stream.catalog_id,
        history_epoch=stream.history_epoch,
        position=42,
        lease_id="lease",
        created_at="2026-12-01T00:00:00+00:00",
        chunks=(ChunkEntry(chunk_key(stream, export_id, 1), "ab" * 32, 10, 100),),
        records=10,
        by_aggregate={"catalog_item": 10},
    )
    data = manifest.to_bytes()
    assert Manifest.from_bytes(data, sha256(data)) == manifest
    assert manifest_key(stream, export_id) == "exports/t%2F1/c%201/3/0f0e/manifest.json"
    assert manifest.chunks[0].key == "exports/t%2F1/c%201/3/0f0e/chunk-000001.bin"
    with pytest.raises(ExportCorrupt, match="checksum"):
        Manifest.from_bytes(data, sha256(b"other"))
    odd = data.replace(b"gapless.export.v1", b"gapless.export.v9")
    with pytest.raises(ExportCorrupt, match="unknown export format"):
        Manifest.from_bytes(odd, sha256(odd))
