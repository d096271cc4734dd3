"""Reparsing stored raw: an envelope and a plain artifact both reparse; nothing stored
reparses to None; a later parser reads parts an earlier one left, but only where the
raw kept them."""

from __future__ import annotations

import json

import pytest

from producers.capture.adapters import ADAPTERS, reparse_stored_raw
from producers.capture.adapters.base import ExtractedProduct, Extraction
from producers.capture.adapters.html_jsonld import HtmlJsonLdAdapter
from producers.capture.exceptions import MalformedEnvelope
from producers.capture.raw import RAW_ENVELOPE_CONTENT_TYPE, RawEnvelope, encode_raw_envelope
from tests.fixtures.source_captures import SourceCapture, all_source_captures, source_captures


@pytest.mark.parametrize("capture", all_source_captures(), ids=str)
def test_a_stored_capture_reparses_to_its_extraction(capture: SourceCapture) -> None:
    adapter = ADAPTERS[capture.adapter]
    again = reparse_stored_raw(adapter, capture.stored, capture.content_type, capture.source_url)
    assert again == adapter.parse(capture.envelope)


def test_a_multi_part_fixture_is_stored_as_an_envelope_and_a_page_alone_as_plain_html() -> None:
    kinds = {c.case: c.content_type for c in source_captures("html-jsonld")}
    assert kinds["product-page"] == RAW_ENVELOPE_CONTENT_TYPE
    assert kinds["graph-page"].startswith("text/html")


def test_nothing_stored_reparses_to_none() -> None:
    assert reparse_stored_raw(ADAPTERS["json-feed"], None, "application/json", "https://x") is None


def test_a_corrupt_stored_envelope_is_a_typed_error() -> None:
    with pytest.raises(MalformedEnvelope):
        reparse_stored_raw(ADAPTERS["html-jsonld"], b"{}", RAW_ENVELOPE_CONTENT_TYPE, "https://x")


class _ReadsCheckedAt(HtmlJsonLdAdapter):
    """A later parser version that also keeps when the live offer was checked."""

    parser_version = HtmlJsonLdAdapter.parser_version + 1

    def parse(self, envelope: RawEnvelope) -> Extraction:
        extraction = super().parse(envelope)
        offers = envelope.get("offers")
        if offers is None:
            return extraction
        checked = json.loads(offers.body)["items"][0]["checkedAt"]
        products = tuple(
            ExtractedProduct.build(
                source_item_id=p.source_item_id,
                class_id=p.class_id,
                title=p.title,
                identifiers=p.identifiers,
                attributes=p.attributes,
                offer={**p.offer, "checked_at": checked},
                locator=p.locator,
            )
            for p in extraction.products
        )
        return Extraction(self.name, self.parser_version, products, extraction.rejected)


def test_a_later_parser_backfills_only_from_what_the_raw_kept() -> None:
    capture = next(c for c in source_captures("html-jsonld") if c.case == "product-page")
    later = _ReadsCheckedAt()
    # Stored as an envelope: the offers part is there to be read again.
    from_envelope = reparse_stored_raw(
        later, encode_raw_envelope(capture.envelope), RAW_ENVELOPE_CONTENT_TYPE, capture.source_url
    )
    assert from_envelope is not None
    assert from_envelope.parser_version == ADAPTERS["html-jsonld"].parser_version + 1
    assert from_envelope.products[0].offer["checked_at"] == "2024-05-14T08:12:09Z"
    # Stored as the page alone (before envelopes): it reparses, and holds what it held.
    page = capture.envelope.part("document")
    from_page = reparse_stored_raw(later, page.body, page.content_type, capture.source_url)
    assert from_page is not None
    assert "checked_at" not in from_page.products[0].offer
    assert from_page.products[0].offer["price"] == "129.95"  # the rendered price, not the live one
