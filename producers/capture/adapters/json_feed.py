"""``json-feed``: a merchant's JSON product feed.

The document part is one JSON object::

    {"version": 3, "merchant": {"id", "name"}, "generated_at": "…", "currency": "EUR",
     "products": [{"id", "sku", "title", "category", "brand", "gtin", "mpn",
                   "description", "attributes": {"color", "size", "material",
                   "weight_grams"}, "images": [...], "link", "updated_at",
                   "offer": {"price": {"amount", "currency"}, "availability",
                             "condition", "url", "stock_quantity"}}]}

Field names are dotted paths from the document root (list positions dropped):
``products.offer.price.amount``. A product without ``id`` or ``title``, with an
invalid GTIN or price, or repeating an earlier product's id is rejected on its own;
a body that is not such an object rejects the whole capture.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal, TypedDict, get_args

from producers.capture.adapters.base import ExtractedProduct, Extraction, RejectedItem
from producers.capture.adapters.inventory import (
    Disposition,
    PendingInventory,
    SourceFieldInventory,
    Stored,
    excluded,
    inventory,
)
from producers.capture.adapters.normalize import (
    class_of,
    currency,
    gtin,
    leaf_paths,
    pointer,
    price,
    required_text,
    text,
    vocabulary,
)
from producers.capture.adapters.versions import PARSER_VERSIONS
from producers.capture.exceptions import (
    DuplicateItem,
    InvalidField,
    ItemProblem,
    MalformedCapture,
    NotAnObject,
    UnsupportedContent,
)
from producers.capture.raw import (
    DOCUMENT_ROLE,
    RAW_ENVELOPE_CONTENT_TYPE,
    RawEnvelope,
    media_essence,
)

NAME: Final = "json-feed"
_DOCUMENT_TYPES: Final = frozenset({"application/json"})

JsonFeedField = Literal[
    "version",
    "merchant.id",
    "merchant.name",
    "generated_at",
    "currency",
    "products.id",
    "products.sku",
    "products.title",
    "products.category",
    "products.brand",
    "products.gtin",
    "products.mpn",
    "products.description",
    "products.attributes.color",
    "products.attributes.size",
    "products.attributes.material",
    "products.attributes.weight_grams",
    "products.images",
    "products.link",
    "products.updated_at",
    "products.offer.price.amount",
    "products.offer.price.currency",
    "products.offer.availability",
    "products.offer.condition",
    "products.offer.url",
    "products.offer.stock_quantity",
]
FIELDS: Final[tuple[JsonFeedField, ...]] = get_args(JsonFeedField)

_CAPTURE_DATES_IT = (
    "the capture's captured_at already dates the evidence, and stale work is caught by"
    " fingerprint, not by the merchant's clock"
)

JsonFeedDispositions = TypedDict(
    "JsonFeedDispositions",
    {
        "version": Disposition,
        "merchant.id": Disposition,
        "merchant.name": Disposition,
        "generated_at": Disposition,
        "currency": Disposition,
        "products.id": Disposition,
        "products.sku": Disposition,
        "products.title": Disposition,
        "products.category": Disposition,
        "products.brand": Disposition,
        "products.gtin": Disposition,
        "products.mpn": Disposition,
        "products.description": Disposition,
        "products.attributes.color": Disposition,
        "products.attributes.size": Disposition,
        "products.attributes.material": Disposition,
        "products.attributes.weight_grams": Disposition,
        "products.images": Disposition,
        "products.link": Disposition,
        "products.updated_at": Disposition,
        "products.offer.price.amount": Disposition,
        "products.offer.price.currency": Disposition,
        "products.offer.availability": Disposition,
        "products.offer.condition": Disposition,
        "products.offer.url": Disposition,
        "products.offer.stock_quantity": Disposition,
    },
)

DISPOSITIONS: Final[JsonFeedDispositions] = {
    "version": excluded(
        "the feed format's own version number; it tells the parser how to read the file"
        " and states nothing about any product"
    ),
    "merchant.id": excluded(
        "derived elsewhere: the merchant is the capture's source, fixed by the collector's"
        " credentials, and a feed cannot name another one"
    ),
    "merchant.name": excluded(
        "derived elsewhere: the display name of the merchant the capture's source already"
        " identifies; no product field holds it"
    ),
    "generated_at": excluded(f"when the merchant built the file; {_CAPTURE_DATES_IT}"),
    "currency": Stored("offer.currency"),  # the default for prices that name none
    "products.id": Stored("source_item_id"),
    "products.sku": Stored("identity.sku"),
    "products.title": Stored("title"),
    "products.category": Stored("class_id"),
    "products.brand": Stored("identity.brand"),
    "products.gtin": Stored("identity.gtin"),
    "products.mpn": Stored("identity.mpn"),
    "products.description": Stored("attributes.description"),
    "products.attributes.color": Stored("attributes.colour"),
    "products.attributes.size": Stored("attributes.size"),
    "products.attributes.material": Stored("attributes.material"),
    "products.attributes.weight_grams": Stored("attributes.weight_grams"),
    "products.images": excluded(
        "links to the merchant's product photos; a catalog item has no media field and the"
        " links stay readable in the stored raw feed"
    ),
    "products.link": Stored("attributes.canonical_url"),
    "products.updated_at": excluded(f"the merchant's own edit time; {_CAPTURE_DATES_IT}"),
    "products.offer.price.amount": Stored("offer.price"),
    "products.offer.price.currency": Stored("offer.currency"),
    "products.offer.availability": Stored("offer.availability"),
    "products.offer.condition": Stored("offer.condition"),
    "products.offer.url": Stored("offer.url"),
    "products.offer.stock_quantity": excluded(
        "the exact stock count changes with every sale; availability is stored and says"
        " what the catalog needs, while the count would make each crawl a new revision"
    ),
}

INVENTORY: Final = inventory(FIELDS, DISPOSITIONS)


def _feed(envelope: RawEnvelope) -> dict[str, Any]:
    document = envelope.part(DOCUMENT_ROLE)
    essence = media_essence(document.content_type)
    if essence not in _DOCUMENT_TYPES:
        raise UnsupportedContent(f"{NAME} reads application/json documents, not {essence!r}")
    try:
        feed = json.loads(document.body)
    except (ValueError, RecursionError) as exc:
        raise MalformedCapture(f"the feed is not JSON: {exc}") from exc
    if not isinstance(feed, dict):
        raise MalformedCapture("the feed is a JSON object")
    if not isinstance(feed.get("products"), list):
        raise MalformedCapture("the feed has no products list")
    return feed


def _object(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidField(f"{name} must be an object")
    return value


def _product(item: Any, default_currency: str | None, locator: str) -> ExtractedProduct:
    if not isinstance(item, dict):
        raise NotAnObject("a product is a JSON object")
    facets = _object(item.get("attributes"), "attributes")
    offer_in = _object(item.get("offer"), "offer")
    price_in = _object(offer_in.get("price"), "offer.price")
    identifiers = {
        "sku": text(item.get("sku"), "sku"),
        "brand": text(item.get("brand"), "brand"),
        "gtin": gtin(item.get("gtin"), "gtin"),
        "mpn": text(item.get("mpn"), "mpn"),
    }
    attributes = {
        "description": text(item.get("description"), "description"),
        "colour": text(facets.get("color"), "attributes.color"),
        "size": text(facets.get("size"), "attributes.size"),
        "material": text(facets.get("material"), "attributes.material"),
        "weight_grams": text(facets.get("weight_grams"), "attributes.weight_grams"),
        "canonical_url": text(item.get("link"), "link"),
    }
    amount = price(price_in.get("amount"), "offer.price.amount")
    offer = {
        "price": amount,
        "currency": currency(price_in.get("currency"), "offer.price.currency")
        or (default_currency if amount is not None else None),
        "availability": vocabulary(offer_in.get("availability"), "offer.availability"),
        "condition": vocabulary(offer_in.get("condition"), "offer.condition", "Condition"),
        "url": text(offer_in.get("url"), "offer.url"),
    }
    if amount is not None and offer["currency"] is None:
        raise InvalidField("offer.price.amount has no currency, nor has the feed")
    return ExtractedProduct.build(
        source_item_id=required_text(item.get("id"), "id"),
        class_id=class_of(text(item.get("category"), "category")),
        title=required_text(item.get("title"), "title"),
        identifiers=_present(identifiers),
        attributes=_present(attributes),
        offer=_present(offer),
        locator=locator,
    )


def _present(values: dict[str, str | None]) -> dict[str, str]:
    return {key: value for key, value in values.items() if value is not None}


class JsonFeedAdapter:
    name: str = NAME
    parser_version: int = PARSER_VERSIONS[NAME]
    source_fields: SourceFieldInventory[Any] | PendingInventory = INVENTORY

    def accepts(self, content_type: str) -> bool:
        return media_essence(content_type) in _DOCUMENT_TYPES | {RAW_ENVELOPE_CONTENT_TYPE}

    def parse(self, envelope: RawEnvelope) -> Extraction:
        feed = _feed(envelope)
        try:
            default_currency = currency(feed.get("currency"), "currency")
        except ItemProblem as problem:
            raise MalformedCapture(problem.message) from None
        products: list[ExtractedProduct] = []
        rejected: list[RejectedItem] = []
        seen: set[str] = set()
        for index, item in enumerate(feed["products"]):
            locator = f"{DOCUMENT_ROLE}#{pointer('products', index)}"
            try:
                product = _product(item, default_currency, locator)
                if product.source_item_id in seen:
                    raise DuplicateItem(f"id {product.source_item_id!r} repeats an earlier product")
            except ItemProblem as problem:
                rejected.append(RejectedItem(locator, problem.code, problem.message))
                continue
            seen.add(product.source_item_id)
            products.append(product)
        return Extraction(self.name, self.parser_version, tuple(products), tuple(rejected))

    def list_source_fields(self, envelope: RawEnvelope) -> frozenset[str]:
        stated = set(leaf_paths(_feed(envelope)))
        # Parts this adapter does not read are kept in the raw; name them so an
        # inventory has to decide about them too.
        stated.update(f"part:{role}" for role in envelope.roles if role != DOCUMENT_ROLE)
        return frozenset(stated)
