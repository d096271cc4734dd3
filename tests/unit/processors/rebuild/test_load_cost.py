"""``processors.rebuild.load.with_chunk``: a chunk's seconds shared among its kinds."""

from __future__ import annotations

import pytest

from processors.rebuild.load import with_chunk


def test_a_chunk_adds_its_rows_and_shares_its_seconds_by_record_count() -> None:
    before = {"catalog_item": {"rows": 100, "seconds": 2.0}}
    after = with_chunk(before, {"catalog_item": 30, "attribute_value": 90, "item_split": 0}, 4.0)
    assert after == {
        "catalog_item": {"rows": 130, "seconds": pytest.approx(3.0)},
        "attribute_value": {"rows": 90, "seconds": pytest.approx(3.0)},
    }
    assert before == {"catalog_item": {"rows": 100, "seconds": 2.0}}  # not changed in place
