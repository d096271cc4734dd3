"""``CLAIM_FIELDS``: the names captured products can carry for an identity rule to
match, read from the adapters' inventories, against what the adapters extract from
every fixture capture."""

from __future__ import annotations

from producers.capture.adapters import ADAPTERS, CLAIM_FIELDS
from tests.fixtures.source_captures import all_source_captures


def test_every_name_an_extracted_product_carries_is_a_claim_field() -> None:
    carried: set[str] = set()
    for capture in all_source_captures():
        for product in ADAPTERS[capture.adapter].parse(capture.envelope).products:
            carried |= {"title", *product.identifiers, *product.attributes}
    assert carried <= CLAIM_FIELDS, sorted(carried - CLAIM_FIELDS)
    assert {"brand", "mpn", "gtin", "sku"} <= carried


def test_offer_fields_are_no_claim_fields() -> None:
    """An offer belongs to the listing, not to the item: no rule can name its price."""
    assert not {"price", "currency", "availability", "url"} & CLAIM_FIELDS
