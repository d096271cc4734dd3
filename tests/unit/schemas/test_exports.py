"""The export chunks and the manifest: what is written reads back, and any change to
the bytes is refused with ``EXPORT_CORRUPT``."""

from __future__ import annotations

import pytest

from schemas.exports import (
    KINDS,
    ChunkEntry,
    ExportCorrupt,
    Manifest,
    check_chunk,
    chunk_key,
    manifest_key,
    sha256,
)
from schemas.ids import StreamId

CHUNK = b'{"kind" : "catalog_item", "id" : "a\\\\b"}\n{"kind" : "listing_mapping"}\n'


def test_a_chunk_reads_back_with_its_checksum_and_count() -> None:
    assert check_chunk(CHUNK, sha256(CHUNK), 2) == CHUNK
    assert check_chunk(b"", sha256(b""), 0) == b""


@pytest.mark.parametrize(
    ("damage", "records", "message"),
    [
        (lambda d: d[:-1], 2, "line boundary"),
        (lambda d: d[: d.index(b"\n") + 1], 2, "has 1 records, its manifest says 2"),
        (lambda d: d, 3, "has 2 records, its manifest says 3"),
    ],
)
def test_damaged_chunks_are_refused(damage, records, message) -> None:  # type: ignore[no-untyped-def]
    bad = damage(CHUNK)
    if bad != CHUNK:
        with pytest.raises(ExportCorrupt, match="checksum"):
            check_chunk(bad, sha256(CHUNK), records)
    with pytest.raises(ExportCorrupt, match=message):
        check_chunk(bad, sha256(bad), records)  # even with a matching checksum


def test_the_kinds_are_the_projections_aggregate_types_in_load_order() -> None:
    assert list(KINDS)[:3] == ["catalog_item", "attribute_definition", "attribute_value"]
    assert all("kind" not in fields for fields in KINDS.values())


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
        chunks=(
            ChunkEntry(chunk_key(stream, export_id, 1), "ab" * 32, 10, 100, {"catalog_item": 10}),
        ),
        records=10,
        by_aggregate={"catalog_item": 10},
    )
    data = manifest.to_bytes()
    assert Manifest.from_bytes(data, sha256(data)) == manifest
    assert manifest_key(stream, export_id) == "exports/t%2F1/c%201/3/0f0e/manifest.json"
    assert manifest.chunks[0].key == "exports/t%2F1/c%201/3/0f0e/chunk-000001.jsonl"
    with pytest.raises(ExportCorrupt, match="checksum"):
        Manifest.from_bytes(data, sha256(b"other"))
    for other in (b"gapless.export.v9", b"gapless.export.v1"):  # v1 (Avro) no longer loads
        odd = data.replace(b"gapless.export.v2", other)
        with pytest.raises(ExportCorrupt, match="unknown export format"):
            Manifest.from_bytes(odd, sha256(odd))
