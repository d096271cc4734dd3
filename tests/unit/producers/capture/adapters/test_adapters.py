"""The two adapters on edge cases: a bad product is rejected alone, a bad capture is
one typed ``AdapterError``, and nothing else ever escapes on arbitrary input."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producers.capture.adapters import (
    ADAPTERS,
    ExtractedProduct,
    adapter_named,
    product_fingerprint,
)
from producers.capture.exceptions import AdapterError, UnknownAdapter
from producers.capture.raw import RAW_ENVELOPE_CONTENT_TYPE, RawEnvelope, RawPart

FEED = ADAPTERS["json-feed"]
PAGE = ADAPTERS["html-jsonld"]


def feed(products: list[Any], **top: Any) -> RawEnvelope:
    body = json.dumps({"currency": "EUR", **top, "products": products}).encode()
    return RawEnvelope((RawPart("document", "application/json", body),))


def page(*blocks: Any, offers: Any = None, raw_blocks: tuple[str, ...] = ()) -> RawEnvelope:
    scripts = "".join(
        f'<script type="application/ld+json">{block}</script>'
        for block in (*(json.dumps(b) for b in blocks), *raw_blocks)
    )
    parts = [RawPart("document", "text/html", f"<html><head>{scripts}</head></html>".encode())]
    if offers is not None:
        parts.append(RawPart("offers", "application/json", json.dumps(offers).encode()))
    return RawEnvelope(tuple(parts))


def test_a_bad_product_is_rejected_and_later_products_still_extracted() -> None:
    extraction = FEED.parse(
        feed(
            [
                {"id": "1", "title": "One", "offer": {"price": {"amount": "-3"}}},
                "not an object",
                {"id": "2", "title": "Two", "offer": {"price": {"amount": "3.10"}}},
                {"id": "3", "title": {"en": "Three"}},
                {"id": "4", "title": "Four", "gtin": "12345"},
                {"id": "2", "title": "Two again"},
            ]
        )
    )
    assert [p.source_item_id for p in extraction.products] == ["2"]
    assert dict(extraction.products[0].offer) == {"price": "3.1", "currency": "EUR"}
    assert [(r.locator, r.code) for r in extraction.rejected] == [
        ("document#/products/0", "INVALID_FIELD"),
        ("document#/products/1", "NOT_AN_OBJECT"),
        ("document#/products/3", "INVALID_FIELD"),
        ("document#/products/4", "INVALID_GTIN"),
        ("document#/products/5", "DUPLICATE_ITEM"),
    ]


def test_a_price_without_any_currency_is_rejected() -> None:
    extraction = FEED.parse(
        feed([{"id": "1", "title": "t", "offer": {"price": {"amount": 1}}}], currency=None)
    )
    assert [r.code for r in extraction.rejected] == ["INVALID_FIELD"]
    assert "no currency" in extraction.rejected[0].message


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "MALFORMED_CAPTURE"),
        (b"[]", "MALFORMED_CAPTURE"),
        (b'{"products": {}}', "MALFORMED_CAPTURE"),
        (b'{"products": [], "currency": "euro"}', "MALFORMED_CAPTURE"),
        (b"[" * 100_000, "MALFORMED_CAPTURE"),
    ],
)
def test_an_unusable_feed_is_one_adapter_error(body: bytes, code: str) -> None:
    envelope = RawEnvelope((RawPart("document", "application/json", body),))
    with pytest.raises(AdapterError) as caught:
        FEED.parse(envelope)
    assert caught.value.code == code


def test_content_types_and_parts_are_checked() -> None:
    assert FEED.accepts("application/json; charset=utf-8")
    assert FEED.accepts(RAW_ENVELOPE_CONTENT_TYPE)
    assert not FEED.accepts("text/html")
    assert PAGE.accepts("text/html; charset=utf-8") and not PAGE.accepts("application/json")
    with pytest.raises(AdapterError) as caught:
        FEED.parse(RawEnvelope((RawPart("document", "text/html", b"{}"),)))
    assert caught.value.code == "UNSUPPORTED_CONTENT"
    with pytest.raises(AdapterError) as caught:
        PAGE.parse(RawEnvelope((RawPart("offers", "application/json", b"{}"),)))
    assert caught.value.code == "MISSING_PART"


def test_an_unknown_adapter_is_a_typed_error() -> None:
    with pytest.raises(UnknownAdapter) as caught:
        adapter_named("xml-feed")
    assert caught.value.code == "UNKNOWN_ADAPTER"
    assert "html-jsonld, json-feed" in caught.value.message
    assert adapter_named("json-feed") is FEED


PRODUCT = {"@context": "https://schema.org", "@type": "Product", "@id": "p1", "name": "Mug"}


def test_malformed_json_ld_rejects_the_capture() -> None:
    with pytest.raises(AdapterError, match="JSON-LD block 1") as caught:
        PAGE.parse(page(PRODUCT, raw_blocks=('{"@type": "Product", "name": }',)))
    assert caught.value.code == "MALFORMED_CAPTURE"


def test_a_page_without_a_product_rejects_the_capture() -> None:
    with pytest.raises(AdapterError) as caught:
        PAGE.parse(page({"@type": "Organization", "name": "Shop"}))
    assert caught.value.code == "NO_PRODUCTS"


def test_a_product_missing_its_name_or_id_is_rejected_and_later_ones_extracted() -> None:
    extraction = PAGE.parse(
        page(
            [
                {"@type": "Product", "sku": "S1"},
                {"@type": "Product", "name": "No id at all"},
                {"@type": "schema:Product", "name": "Kept", "sku": "S3"},
            ]
        )
    )
    assert [p.source_item_id for p in extraction.products] == ["S3"]
    assert [(r.locator, r.code) for r in extraction.rejected] == [
        ("document#script[0]/0", "MISSING_FIELD"),
        ("document#script[0]/1", "MISSING_FIELD"),
    ]


def test_several_offers_for_one_product_are_rejected_not_guessed() -> None:
    two = [{"price": "1", "priceCurrency": "EUR"}, {"price": "2", "priceCurrency": "EUR"}]
    extraction = PAGE.parse(page({**PRODUCT, "offers": two}))
    assert [r.code for r in extraction.rejected] == ["MULTIPLE_OFFERS"]


def test_the_live_offers_part_replaces_the_rendered_offer() -> None:
    product = {
        **PRODUCT,
        "sku": "M-1",
        "offers": {"price": "10.00", "priceCurrency": "EUR", "availability": "InStock"},
    }
    live = {
        "items": [{"sku": "M-1", "price": "8.00", "availability": "https://schema.org/SoldOut"}]
    }
    [rendered] = PAGE.parse(page(product)).products
    [seen] = PAGE.parse(page(product, offers=live)).products
    assert dict(rendered.offer) == {"price": "10", "currency": "EUR", "availability": "in_stock"}
    assert dict(seen.offer) == {"price": "8", "currency": "EUR", "availability": "sold_out"}
    with pytest.raises(AdapterError) as caught:
        PAGE.parse(page(product, offers={"items": "none"}))
    assert caught.value.code == "MALFORMED_CAPTURE"


def test_gtins_of_every_length_read_as_gtin14_and_conflicts_are_rejected() -> None:
    extraction = PAGE.parse(
        page(
            {
                "@graph": [
                    {**PRODUCT, "@id": "a", "gtin13": "4006381333931"},
                    {**PRODUCT, "@id": "b", "gtin": "04006381333931"},
                    {**PRODUCT, "@id": "c", "gtin8": "96385074", "gtin13": "4006381333931"},
                    {**PRODUCT, "@id": "d", "gtin12": "036000291453"},
                ]
            }
        )
    )
    assert [(p.source_item_id, p.identifiers["gtin"]) for p in extraction.products] == [
        ("a", "04006381333931"),
        ("b", "04006381333931"),
    ]
    assert [r.code for r in extraction.rejected] == ["CONFLICTING_FIELD", "INVALID_GTIN"]


def test_the_fingerprint_is_of_the_content_not_the_locator() -> None:
    fields: dict[str, Any] = {
        "source_item_id": "1",
        "class_id": "c",
        "title": "t",
        "identifiers": {"gtin": "1"},
        "attributes": {},
        "offer": {},
    }
    here = ExtractedProduct.build(**fields, locator="document#/products/0")
    there = ExtractedProduct.build(**fields, locator="document#/products/9")
    changed = ExtractedProduct.build(**{**fields, "title": "t2"}, locator="document#/products/0")
    assert here.fingerprint == there.fingerprint != changed.fingerprint


text_maps = st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=6)


@given(text_maps, text_maps, text_maps, st.randoms())
def test_the_fingerprint_does_not_depend_on_mapping_order(
    identifiers: dict[str, str], attributes: dict[str, str], offer: dict[str, str], rng: Any
) -> None:
    def shuffled(values: dict[str, str]) -> dict[str, str]:
        items = list(values.items())
        rng.shuffle(items)
        return dict(items)

    assert product_fingerprint("c", "t", identifiers, attributes, offer) == product_fingerprint(
        "c", "t", shuffled(identifiers), shuffled(attributes), shuffled(offer)
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
feed_like_keys = st.sampled_from(
    [
        "id",
        "title",
        "gtin",
        "brand",
        "category",
        "attributes",
        "offer",
        "price",
        "amount",
        "currency",
        "availability",
        "condition",
        "link",
    ]
)
feed_like_products = st.recursive(
    json_values,
    lambda children: st.dictionaries(feed_like_keys, children, max_size=8),
    max_leaves=30,
)


def _only_adapter_errors(adapter: Any, envelope: RawEnvelope) -> None:
    for read in (adapter.parse, adapter.list_source_fields):
        with contextlib.suppress(AdapterError):
            read(envelope)


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_the_feed_adapter_raises_only_adapter_errors_on_arbitrary_bytes(body: bytes) -> None:
    _only_adapter_errors(FEED, RawEnvelope((RawPart("document", "application/json", body),)))


@settings(max_examples=300)
@given(st.lists(feed_like_products, max_size=5), json_values)
def test_the_feed_adapter_raises_only_adapter_errors_on_arbitrary_products(
    products: list[Any], currency: Any
) -> None:
    _only_adapter_errors(FEED, feed(products, currency=currency))


@settings(max_examples=300)
@given(st.binary(max_size=400) | st.text(max_size=300).map(str.encode))
def test_the_page_adapter_raises_only_adapter_errors_on_arbitrary_bytes(body: bytes) -> None:
    html = b'<script type="application/ld+json">' + body + b"</script>"
    for document in (body, html):
        _only_adapter_errors(PAGE, RawEnvelope((RawPart("document", "text/html", document),)))


@settings(max_examples=300)
@given(st.lists(feed_like_products | json_values, max_size=4))
def test_the_page_adapter_raises_only_adapter_errors_on_arbitrary_json_ld(nodes: list[Any]) -> None:
    products = [{"@type": "Product", **n} if isinstance(n, dict) else n for n in nodes]
    _only_adapter_errors(PAGE, page(*products))
