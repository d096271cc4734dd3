"""The export chunks and the manifest: what is written reads back, and any change to
the bytes is refused with ``EXPORT_CORRUPT``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas.exports import (
    KINDS,
    TYPES,
    ChunkEntry,
    ExportCorrupt,
    Manifest,
    check_chunk,
    chunk_key,
    manifest_key,
    read_record,
    sha256,
)
from schemas.ids import StreamId

CHUNK = b"m1\t1\ti1\t2\t\\N\nm\\\\2\t1\ti2\t2\t00000000-0000-4000-8000-000000000001\n"


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
    assert all("kind" not in [f.name for f in fields] for fields in KINDS.values())
    assert {f.type for fields in KINDS.values() for f in fields} <= TYPES


def test_a_record_reads_back_as_postgresql_spelled_it() -> None:
    item = read_record(
        "catalog_item",
        b'a\\\\b\t3\tlamp\tactive\tTab\\there\\nand there\t\\N\t{"size": "10\\\\\\\\"}\t'
        b"00000000-0000-4000-8000-000000000003\n",
    )
    assert item == {
        "id": "a\\b", "revision": 3, "class_id": "lamp", "status": "active",
        "title": "Tab\there\nand there", "parent_item_id": None, "attributes": {"size": "10\\"},
        "decision_id": "00000000-0000-4000-8000-000000000003",
    }  # fmt: skip
    split = read_record(
        "item_split",
        b'00000000-0000-4000-8000-000000000002\t1\ts\t4\t{a,"b c","d\\\\"e",""}\t{}\t'
        b"00000000-0000-4000-8000-000000000001",
    )
    assert split["successor_item_ids"] == ["a", "b c", 'd"e', ""]
    policy = read_record(
        "shipping_policy",
        b"p1\t2\tEU\t2026-12-01 00:00:00+00\t\\N\t{}\t00000000-0000-4000-8000-000000000001",
    )
    assert policy["effective_from"] == datetime(2026, 12, 1, tzinfo=UTC)
    assert policy["effective_to"] is None
    with pytest.raises(ExportCorrupt, match="has 2 fields, not 5"):
        read_record("listing_mapping", b"m1\t1\n")
    with pytest.raises(ExportCorrupt, match="would not read"):
        read_record("listing_mapping", b"m1\tone\ti1\t2\t\\N\n")
    assert read_record("listing_mapping", CHUNK.split(b"\n")[1])["id"] == "m\\2"


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
    assert manifest.chunks[0].key == "exports/t%2F1/c%201/3/0f0e/chunk-000001.tsv"
    with pytest.raises(ExportCorrupt, match="checksum"):
        Manifest.from_bytes(data, sha256(b"other"))
    # v1 (Avro), v2 (JSON lines) and v3 (items without their decision) no longer load
    for other in (
        b"gapless.export.v9",
        b"gapless.export.v1",
        b"gapless.export.v2",
        b"gapless.export.v3",
    ):
        odd = data.replace(b"gapless.export.v4", other)
        with pytest.raises(ExportCorrupt, match="unknown export format"):
            Manifest.from_bytes(odd, sha256(odd))


def test_a_manifest_whose_chunk_holds_two_kinds_or_an_unknown_one_is_refused() -> None:
    stream = StreamId("t", "c", 1)
    for kinds in ({"catalog_item": 5, "listing_mapping": 5}, {"catalog_class": 10}, {}):
        manifest = Manifest(
            export_id="e", tenant_id="t", catalog_id="c", history_epoch=1, position=1,
            lease_id="l", created_at="2026-12-01T00:00:00+00:00",
            chunks=(ChunkEntry(chunk_key(stream, "e", 1), "ab" * 32, 10, 100, kinds),),
            records=10, by_aggregate={"catalog_item": 10},
        )  # fmt: skip
        data = manifest.to_bytes()
        with pytest.raises(ExportCorrupt, match="kind"):
            Manifest.from_bytes(data, sha256(data))
