"""The export spool (a local file, no services): rows are cut into chunks at the limit
and where the kind changes, each chunk reads back as written with its SHA-256, and a
block that is not one whole line is refused."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from producers.exports.exceptions import ExportError
from producers.exports.spool import ExportSpool


def _rows(kind: str, n: int) -> list[bytes]:
    return [f"{kind}-{i}\t1\n".encode() for i in range(n)]


def test_chunks_end_at_the_limit_and_where_the_kind_changes(tmp_path: Path) -> None:
    items, values = _rows("item", 2500), _rows("value", 1100)
    closed = 0
    with ExportSpool.open(str(tmp_path), uuid.uuid4(), 1000) as spool:
        for row in items:
            closed += spool.add("catalog_item", memoryview(row))
        for row in values:
            closed += spool.add("attribute_value", row)
        assert spool.records == 3600
        spool.cut()
        chunks = list(spool.chunks)
        data = [spool.read(c) for c in chunks]
    assert [(c.lines, c.kinds) for c in chunks] == [
        (1000, {"catalog_item": 1000}),
        (1000, {"catalog_item": 1000}),
        (500, {"catalog_item": 500}),
        (1000, {"attribute_value": 1000}),
        (100, {"attribute_value": 100}),
    ]
    assert closed == 4  # the last chunk is closed by the caller's cut
    assert b"".join(data) == b"".join(items + values)
    assert all(hashlib.sha256(d).hexdigest() == c.sha256 for d, c in zip(data, chunks, strict=True))
    assert not list(tmp_path.iterdir())  # the spool file went with the spool


def test_a_block_of_two_lines_or_of_part_of_one_is_refused(tmp_path: Path) -> None:
    for blocks in ([b"a\t1\nb\t1\n"], [b"a\t1\n", b"b\t"]):
        with ExportSpool.open(str(tmp_path), uuid.uuid4(), 1000) as spool:
            for block in blocks:
                spool.add("catalog_item", block)
            with pytest.raises(ExportError, match="other than one row"):
                spool.cut()
