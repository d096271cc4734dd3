"""Source-field inventory conformance: every registered adapter's fixtures are read
back through the adapter's own ``list_source_fields``; every field stated must have a
disposition, and every stored one must be on the extraction where the inventory says.
Enrolment is a ratchet: the pending baseline only shrinks."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, get_args

import pytest

from producers.capture.adapters import (
    ADAPTERS,
    PENDING_SOURCE_FIELD_INVENTORY,
    html_jsonld,
    json_feed,
)
from producers.capture.adapters.base import ExtractedProduct, Extraction, SourceAdapter
from producers.capture.adapters.inventory import (
    PendingInventory,
    SourceFieldInventory,
    Stored,
    baseline_problems,
    pending_inventory_baseline,
)
from producers.capture.raw import DOCUMENT_ROLE, RawEnvelope, RawPart
from tests.fixtures.source_captures import SourceCapture, source_captures

ENROLLED = sorted(
    name
    for name, adapter in ADAPTERS.items()
    if isinstance(adapter.source_fields, SourceFieldInventory)
)


def _inventory(adapter: SourceAdapter) -> SourceFieldInventory[Any]:
    inventory = adapter.source_fields
    assert isinstance(inventory, SourceFieldInventory)
    return inventory


def _holds(product: ExtractedProduct, stored: Stored) -> bool:
    attribute, key = stored.locate()
    value = getattr(product, attribute)
    if key is None:
        return bool(value)
    return bool(value.get(key))


def assert_inventory_holds(adapter: SourceAdapter, envelope: RawEnvelope, where: str) -> None:
    """The conformance check of one capture (raises AssertionError naming the field)."""
    inventory = _inventory(adapter)
    stated = adapter.list_source_fields(envelope)
    unaccounted = inventory.unaccounted(stated)
    assert not unaccounted, (
        f"{where}: {adapter.name} states fields its inventory does not account for:"
        f" {', '.join(unaccounted)}; store each with Stored(target) or exclude it with"
        " excluded(reason)"
    )
    extraction: Extraction = adapter.parse(envelope)
    for name in sorted(stated):
        disposition = inventory.disposition(name)
        if isinstance(disposition, Stored):
            assert any(_holds(p, disposition) for p in extraction.products), (
                f"{where}: {adapter.name} field {name} is stored at {disposition.target},"
                " but no extracted product has a value there"
            )


def test_both_adapters_are_registered_and_enrolled() -> None:
    assert {"json-feed", "html-jsonld"} <= set(ENROLLED)


@pytest.mark.parametrize("name", ENROLLED)
def test_every_enrolled_adapter_has_a_fixture(name: str) -> None:
    assert source_captures(name), f"{name} has no fixture under tests/fixtures/sources/{name}/"


@pytest.mark.parametrize(
    "capture", [c for name in ENROLLED for c in source_captures(name)], ids=str
)
def test_every_stated_field_is_stored_or_excluded(capture: SourceCapture) -> None:
    assert_inventory_holds(ADAPTERS[capture.adapter], capture.envelope, str(capture))


@pytest.mark.parametrize("name", ENROLLED)
def test_the_fixtures_state_every_stored_field(name: str) -> None:
    """Otherwise a stored field's target would never be checked."""
    adapter = ADAPTERS[name]
    stated: set[str] = set()
    for capture in source_captures(name):
        stated |= adapter.list_source_fields(capture.envelope)
    unexercised = sorted(set(_inventory(adapter).stored()) - stated)
    assert not unexercised, f"{name}: no fixture states the stored fields {unexercised}"


def _feed_with(extra: dict[str, Any]) -> RawEnvelope:
    capture = source_captures("json-feed")[0]
    feed = json.loads(capture.envelope.part(DOCUMENT_ROLE).body)
    feed["products"][0].update(extra)
    part = replace(capture.envelope.part(DOCUMENT_ROLE), body=json.dumps(feed).encode())
    return RawEnvelope((part,))


def _page_with(old: str, new: str, extra_parts: tuple[RawPart, ...] = ()) -> RawEnvelope:
    capture = next(c for c in source_captures("html-jsonld") if c.case == "product-page")
    document = capture.envelope.part(DOCUMENT_ROLE)
    html = document.body.decode()
    assert old in html
    part = replace(document, body=html.replace(old, new, 1).encode())
    others = tuple(p for p in capture.envelope.parts if p.role != DOCUMENT_ROLE)
    return RawEnvelope((part, *others, *extra_parts))


@pytest.mark.parametrize(
    ("adapter", "envelope", "field"),
    [
        ("json-feed", _feed_with({"warranty_years": 2}), "products.warranty_years"),
        (
            "json-feed",
            _feed_with({"attributes": {"heel_drop": "6 mm"}}),
            "products.attributes.heel_drop",
        ),
        ("html-jsonld", _page_with('"mpn":', '"countryOfOrigin": "VN", "mpn":'), "countryOfOrigin"),
        (
            "html-jsonld",
            _page_with('"@type": "Brand",', '"@type": "Brand", "logo": "https://x/l.svg",'),
            "brand.logo",
        ),
        (
            "html-jsonld",
            _page_with(
                "</head>", '<script type="application/ld+json">{"@type": "FAQPage"}</script></head>'
            ),
            "node:FAQPage",
        ),
        (
            "html-jsonld",
            _page_with("</head>", '<meta property="og:locale" content="en_GB"></head>'),
            "meta:og:locale",
        ),
        (
            "html-jsonld",
            _page_with("<h1>", '<h1 itemprop="name">'),
            "microdata:name",
        ),
        (
            "html-jsonld",
            _page_with("<h1>", "<h1>", (RawPart("reviews", "application/json", b"{}"),)),
            "part:reviews",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_field_the_inventory_lacks_fails_with_its_name(
    adapter: str, envelope: RawEnvelope, field: str
) -> None:
    with pytest.raises(AssertionError, match=f"does not account for: {field}$|for: {field};"):
        assert_inventory_holds(ADAPTERS[adapter], envelope, "edited fixture")


@dataclass
class _Relabelled:
    """The json-feed adapter with one field's stored target moved elsewhere."""

    inner: SourceAdapter
    source_fields: SourceFieldInventory[Any] | PendingInventory
    name: str = "json-feed"
    parser_version: int = 1

    def accepts(self, content_type: str) -> bool:
        return self.inner.accepts(content_type)

    def parse(self, envelope: RawEnvelope) -> Extraction:
        return self.inner.parse(envelope)

    def list_source_fields(self, envelope: RawEnvelope) -> frozenset[str]:
        return self.inner.list_source_fields(envelope)


def test_a_stored_field_missing_from_its_target_fails_with_its_name() -> None:
    real = _inventory(ADAPTERS["json-feed"])
    dispositions = dict(real.dispositions)
    dispositions["products.attributes.color"] = Stored("attributes.fabric")
    moved = _Relabelled(ADAPTERS["json-feed"], SourceFieldInventory(real.fields, dispositions))
    capture = source_captures("json-feed")[0]
    with pytest.raises(
        AssertionError, match=r"products\.attributes\.color is stored at attributes\.fabric"
    ):
        assert_inventory_holds(moved, capture.envelope, str(capture))


@pytest.mark.parametrize(
    ("alias", "dispositions_type", "module_inventory"),
    [
        (json_feed.JsonFeedField, json_feed.JsonFeedDispositions, json_feed.INVENTORY),
        (html_jsonld.HtmlJsonLdField, html_jsonld.HtmlJsonLdDispositions, html_jsonld.INVENTORY),
    ],
    ids=["json-feed", "html-jsonld"],
)
def test_the_disposition_map_is_total_over_the_literal(
    alias: Any, dispositions_type: Any, module_inventory: SourceFieldInventory[Any]
) -> None:
    members = set(get_args(alias))
    assert set(module_inventory.fields) == members
    assert set(module_inventory.dispositions) == members
    assert set(dispositions_type.__required_keys__) == members
    assert not dispositions_type.__optional_keys__


def test_the_registered_adapters_carry_their_module_inventories() -> None:
    assert ADAPTERS["json-feed"].source_fields is json_feed.INVENTORY
    assert ADAPTERS["html-jsonld"].source_fields is html_jsonld.INVENTORY


def test_the_pending_baseline_matches_the_registry() -> None:
    inventories = {name: adapter.source_fields for name, adapter in ADAPTERS.items()}
    assert baseline_problems(inventories, pending_inventory_baseline()) == []


def test_the_ratchet_names_unlisted_pending_and_enrolled_baseline_entries() -> None:
    enrolled = json_feed.INVENTORY
    inventories: dict[str, SourceFieldInventory[Any] | PendingInventory] = {
        "listed-pending": PENDING_SOURCE_FIELD_INVENTORY,
        "unlisted-pending": PENDING_SOURCE_FIELD_INVENTORY,
        "enrolled": enrolled,
    }
    problems = baseline_problems(inventories, frozenset({"listed-pending", "enrolled", "gone"}))
    assert problems == [
        "unlisted-pending: has no source-field inventory and is not listed in"
        " source-field-inventory-baseline.json",
        "enrolled: enrolled a source-field inventory; delete its line from"
        " source-field-inventory-baseline.json",
        "gone: listed in source-field-inventory-baseline.json but no adapter has that name",
    ]
    assert baseline_problems(inventories, frozenset({"listed-pending", "unlisted-pending"})) == []
