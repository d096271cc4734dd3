"""How a run cuts its products into batches settled one transaction each."""

from __future__ import annotations

from producers.capture.adapters import ExtractedProduct
from producers.capture.worker.pipeline import next_batch


def _products(*ids: str) -> list[ExtractedProduct]:
    return [
        ExtractedProduct.build(
            source_item_id=i,
            class_id="shoe",
            title=i,
            identifiers={},
            attributes={},
            offer={},
            locator=f"#{n}",
        )
        for n, i in enumerate(ids)
    ]


def _cut(ids: str, start: int, size: int) -> list[list[int]]:
    """The batches a run settling every product would take, one after the other."""
    products, cut = _products(*ids), []
    while start < len(products):
        batch = next_batch(products, start, size)
        cut.append(list(batch))
        start = batch.stop
    return cut


def test_batches_cover_every_index_from_the_start_once_in_order() -> None:
    assert _cut("abcdefg", 0, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert _cut("abcdefg", 2, 3) == [[2, 3, 4], [5, 6]]
    assert _cut("abcdefg", 0, 1) == [[0], [1], [2], [3], [4], [5], [6]]
    assert _cut("abc", 0, 50) == [[0, 1, 2]]


def test_a_source_item_seen_again_starts_a_new_batch() -> None:
    # The second 'a' must find the first one's result settled: another transaction.
    assert _cut("abacad", 0, 50) == [[0, 1], [2, 3], [4, 5]]
    assert _cut("aa", 0, 50) == [[0], [1]]


def test_nothing_is_left_after_the_last_product() -> None:
    assert _cut("abc", 3, 2) == []
    assert _cut("", 0, 2) == []
