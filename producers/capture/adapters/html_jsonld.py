"""``html-jsonld``: a product page carrying schema.org ``Product`` nodes in JSON-LD.

Parts of the raw envelope:

* ``document`` (required): the HTML page. Every ``<script type="application/ld+json">``
  block is read; a block is a node, a list of nodes, or an object with ``@graph``, and a
  node's ``mainEntity`` is looked into as well. Each ``Product`` node is one product.
* ``offers`` (optional): the JSON the page's script fetches for live price and stock,
  ``{"items": [{"sku", "price", "priceCurrency", "availability", …}]}``. When it has an
  entry for a product's ``sku``, its price, currency and availability replace the ones
  the page was rendered with: they are what a shopper saw.

Field names (what ``list_source_fields`` answers): a Product's fields as dotted paths
(``offers.price``, ``brand.name``; ``@context``/``@type`` are JSON-LD syntax, not
statements); any other node as ``node:<Type>``; OpenGraph and ``product:`` meta tags as
``meta:<property>``; microdata as ``microdata:<itemprop>``; the offers part's fields as
``offers:<path>``; a part of any other role as ``part:<role>``.

Reading the parts (HTML, JSON-LD, the offers JSON) is ``html_jsonld_parts``'; this
module maps what they state to products and to field names, under its inventory.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypedDict, get_args

from producers.capture.adapters.base import ExtractedProduct, Extraction, RejectedItem
from producers.capture.adapters.html_jsonld_parts import (
    OFFERS_ROLE,
    Node,
    Page,
    offers_body,
    offers_by_sku,
    read_page,
)
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
    price,
    required_text,
    text,
    vocabulary,
)
from producers.capture.adapters.versions import PARSER_VERSIONS
from producers.capture.exceptions import (
    ConflictingField,
    DuplicateItem,
    InvalidField,
    ItemProblem,
    MissingField,
    MultipleOffers,
    NoProducts,
    UnsupportedContent,
)
from producers.capture.raw import (
    DOCUMENT_ROLE,
    RAW_ENVELOPE_CONTENT_TYPE,
    RawEnvelope,
    RawPart,
    media_essence,
)

NAME: Final = "html-jsonld"
_DOCUMENT_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
_JSONLD_SYNTAX: Final = frozenset({"@context", "@type"})
_GTIN_FIELDS: Final = ("gtin", "gtin8", "gtin12", "gtin13", "gtin14")

HtmlJsonLdField = Literal[
    "@id",
    "name",
    "description",
    "sku",
    "gtin",
    "gtin8",
    "gtin12",
    "gtin13",
    "gtin14",
    "mpn",
    "brand",
    "brand.name",
    "category",
    "color",
    "size",
    "material",
    "weight.value",
    "weight.unitCode",
    "image",
    "url",
    "aggregateRating.ratingValue",
    "aggregateRating.reviewCount",
    "aggregateRating.bestRating",
    "review.author.name",
    "review.datePublished",
    "review.reviewBody",
    "review.reviewRating.ratingValue",
    "offers.price",
    "offers.priceCurrency",
    "offers.availability",
    "offers.itemCondition",
    "offers.url",
    "offers.priceValidUntil",
    "offers.seller.name",
    "node:BreadcrumbList",
    "node:Organization",
    "node:WebSite",
    "node:WebPage",
    "meta:og:type",
    "meta:og:title",
    "meta:og:description",
    "meta:og:url",
    "meta:og:image",
    "meta:og:site_name",
    "meta:product:price:amount",
    "meta:product:price:currency",
    "offers:items.sku",
    "offers:items.price",
    "offers:items.priceCurrency",
    "offers:items.availability",
    "offers:items.inventoryLevel",
    "offers:items.checkedAt",
]
FIELDS: Final[tuple[HtmlJsonLdField, ...]] = get_args(HtmlJsonLdField)

HtmlJsonLdDispositions = TypedDict(
    "HtmlJsonLdDispositions",
    {
        "@id": Disposition,
        "name": Disposition,
        "description": Disposition,
        "sku": Disposition,
        "gtin": Disposition,
        "gtin8": Disposition,
        "gtin12": Disposition,
        "gtin13": Disposition,
        "gtin14": Disposition,
        "mpn": Disposition,
        "brand": Disposition,
        "brand.name": Disposition,
        "category": Disposition,
        "color": Disposition,
        "size": Disposition,
        "material": Disposition,
        "weight.value": Disposition,
        "weight.unitCode": Disposition,
        "image": Disposition,
        "url": Disposition,
        "aggregateRating.ratingValue": Disposition,
        "aggregateRating.reviewCount": Disposition,
        "aggregateRating.bestRating": Disposition,
        "review.author.name": Disposition,
        "review.datePublished": Disposition,
        "review.reviewBody": Disposition,
        "review.reviewRating.ratingValue": Disposition,
        "offers.price": Disposition,
        "offers.priceCurrency": Disposition,
        "offers.availability": Disposition,
        "offers.itemCondition": Disposition,
        "offers.url": Disposition,
        "offers.priceValidUntil": Disposition,
        "offers.seller.name": Disposition,
        "node:BreadcrumbList": Disposition,
        "node:Organization": Disposition,
        "node:WebSite": Disposition,
        "node:WebPage": Disposition,
        "meta:og:type": Disposition,
        "meta:og:title": Disposition,
        "meta:og:description": Disposition,
        "meta:og:url": Disposition,
        "meta:og:image": Disposition,
        "meta:og:site_name": Disposition,
        "meta:product:price:amount": Disposition,
        "meta:product:price:currency": Disposition,
        "offers:items.sku": Disposition,
        "offers:items.price": Disposition,
        "offers:items.priceCurrency": Disposition,
        "offers:items.availability": Disposition,
        "offers:items.inventoryLevel": Disposition,
        "offers:items.checkedAt": Disposition,
    },
)

_RATING_CHURNS = (
    "changes with every new review, so storing it would make each crawl a new revision"
    " of the item; it rates the merchant's listing, not a property of the product"
)
_REVIEWS_ARE_PERSONAL = (
    "data minimisation: reviews carry shoppers' names and words, and the catalog keeps"
    " no review content"
)
_SAME_AS_JSONLD = "written for link previews; duplicate of the JSON-LD"

DISPOSITIONS: Final[HtmlJsonLdDispositions] = {
    "@id": Stored("source_item_id"),
    "name": Stored("title"),
    "description": Stored("attributes.description"),
    "sku": Stored("identity.sku"),
    "gtin": Stored("identity.gtin"),
    "gtin8": Stored("identity.gtin"),
    "gtin12": Stored("identity.gtin"),
    "gtin13": Stored("identity.gtin"),
    "gtin14": Stored("identity.gtin"),
    "mpn": Stored("identity.mpn"),
    "brand": Stored("identity.brand"),
    "brand.name": Stored("identity.brand"),
    "category": Stored("class_id"),
    "color": Stored("attributes.colour"),
    "size": Stored("attributes.size"),
    "material": Stored("attributes.material"),
    "weight.value": Stored("attributes.weight"),
    "weight.unitCode": Stored("attributes.weight_unit"),
    "image": excluded(
        "links to the merchant's product photos; a catalog item has no media field and the"
        " links stay readable in the stored raw page"
    ),
    "url": Stored("attributes.canonical_url"),
    "aggregateRating.ratingValue": excluded(f"the average star rating {_RATING_CHURNS}"),
    "aggregateRating.reviewCount": excluded(f"the number of reviews {_RATING_CHURNS}"),
    "aggregateRating.bestRating": excluded(
        "the top of the rating scale (5 stars); meaningful only beside the rating value,"
        " which is excluded"
    ),
    "review.author.name": excluded(f"a reviewer's name; {_REVIEWS_ARE_PERSONAL}"),
    "review.datePublished": excluded(f"when a review was written; {_REVIEWS_ARE_PERSONAL}"),
    "review.reviewBody": excluded(f"a review's text; {_REVIEWS_ARE_PERSONAL}"),
    "review.reviewRating.ratingValue": excluded(
        f"one reviewer's star rating; {_REVIEWS_ARE_PERSONAL}"
    ),
    "offers.price": Stored("offer.price"),
    "offers.priceCurrency": Stored("offer.currency"),
    "offers.availability": Stored("offer.availability"),
    "offers.itemCondition": Stored("offer.condition"),
    "offers.url": Stored("offer.url"),
    "offers.priceValidUntil": Stored("offer.valid_until"),
    "offers.seller.name": excluded(
        "derived elsewhere: the seller is the merchant this source is registered for,"
        " already named by the capture's source"
    ),
    "node:BreadcrumbList": excluded(
        "the page's navigation trail; it is site navigation, and the product's own"
        " category is what is stored as class_id"
    ),
    "node:Organization": excluded(
        "derived elsewhere: the merchant's own organisation node (logo, contact points);"
        " the capture's source already identifies the merchant"
    ),
    "node:WebSite": excluded(
        "the site's search-box metadata; it describes the website, not a product, and no"
        " item field holds it"
    ),
    "node:WebPage": excluded(
        "the page's own metadata (name, breadcrumb reference); it describes the web page,"
        " not the product, whose node is read on its own"
    ),
    "meta:og:type": excluded(
        "the OpenGraph object type, 'product' on every page this adapter reads; it states"
        " nothing about which product"
    ),
    "meta:og:title": excluded(f"{_SAME_AS_JSONLD} name, stored as title"),
    "meta:og:description": excluded(
        f"{_SAME_AS_JSONLD} description, stored as attributes.description"
    ),
    "meta:og:url": excluded(f"{_SAME_AS_JSONLD} url, stored as attributes.canonical_url"),
    "meta:og:image": excluded(
        "a link-preview photo link; a catalog item has no media field and the link stays"
        " readable in the stored raw page"
    ),
    "meta:og:site_name": excluded(
        "derived elsewhere: the shop's display name, which the capture's source already"
        " identifies; no item field holds it"
    ),
    "meta:product:price:amount": excluded(f"{_SAME_AS_JSONLD} offers.price, stored as offer.price"),
    "meta:product:price:currency": excluded(
        f"{_SAME_AS_JSONLD} offers.priceCurrency, stored as offer.currency"
    ),
    "offers:items.sku": excluded(
        "the join key that matches a live offer to its product; the product's sku is"
        " stored as identity.sku"
    ),
    "offers:items.price": Stored("offer.price"),
    "offers:items.priceCurrency": Stored("offer.currency"),
    "offers:items.availability": Stored("offer.availability"),
    "offers:items.inventoryLevel": excluded(
        "the exact stock count changes with every sale; availability is stored and says"
        " what the catalog needs, while the count would make each crawl a new revision"
    ),
    "offers:items.checkedAt": excluded(
        "when the merchant's stock service answered, moments before the capture; the"
        " capture's captured_at already dates the evidence"
    ),
}

INVENTORY: Final = inventory(FIELDS, DISPOSITIONS)


def _read_page(part: RawPart) -> Page:
    """The page the ``document`` part holds, refused unless it is an HTML document."""
    essence = media_essence(part.content_type)
    if essence not in _DOCUMENT_TYPES:
        raise UnsupportedContent(f"{NAME} reads HTML documents, not {essence!r}")
    return read_page(part)


def _one(value: Any, name: str) -> dict[str, Any]:
    """The single object ``value`` states (an object or a list of one)."""
    if isinstance(value, list):
        if len(value) > 1:
            raise (MultipleOffers if name == "offers" else InvalidField)(
                f"{name} states {len(value)} entries; a catalog item carries one",
            )
        value = value[0] if value else None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidField(f"{name} must be an object")
    return value


def _brand(value: Any) -> str | None:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, dict):
        return text(value.get("name"), "brand.name")
    return text(value, "brand")


def _gtin(node: dict[str, Any]) -> str | None:
    found = {name: gtin(node.get(name), name) for name in _GTIN_FIELDS}
    distinct = {value for value in found.values() if value is not None}
    if len(distinct) > 1:
        stated = ", ".join(f"{n}={node[n]!r}" for n, v in found.items() if v is not None)
        raise ConflictingField(f"the product states different GTINs: {stated}")
    return distinct.pop() if distinct else None


def _product(node: Node, live_offers: dict[str, list[dict[str, Any]]]) -> ExtractedProduct:
    item = node.value
    name = required_text(item.get("name"), "name")
    sku = text(item.get("sku"), "sku")
    url = text(item.get("url"), "url")
    # The page's own id for the product; pages without one are keyed by sku, then url.
    source_item_id = text(item.get("@id"), "@id") or sku or url
    if source_item_id is None:
        raise MissingField("the product states none of @id, sku or url")
    weight = _one(item.get("weight"), "weight")
    offer_in = _one(item.get("offers"), "offers")
    offer = {
        "price": price(offer_in.get("price"), "offers.price"),
        "currency": currency(offer_in.get("priceCurrency"), "offers.priceCurrency"),
        "availability": vocabulary(offer_in.get("availability"), "offers.availability"),
        "condition": vocabulary(offer_in.get("itemCondition"), "offers.itemCondition", "Condition"),
        "url": text(offer_in.get("url"), "offers.url"),
        "valid_until": text(offer_in.get("priceValidUntil"), "offers.priceValidUntil"),
    }
    live = live_offers.get(sku, []) if sku else []
    if len(live) > 1:
        raise MultipleOffers(f"the offers part has {len(live)} entries for {sku!r}")
    if live:
        for key, value in (
            ("price", price(live[0].get("price"), "offers:items.price")),
            ("currency", currency(live[0].get("priceCurrency"), "offers:items.priceCurrency")),
            ("availability", vocabulary(live[0].get("availability"), "offers:items.availability")),
        ):
            if value is not None:
                offer[key] = value
    if offer["price"] is not None and offer["currency"] is None:
        raise InvalidField("offers.price has no priceCurrency")
    return ExtractedProduct.build(
        source_item_id=source_item_id,
        class_id=class_of(text(item.get("category"), "category")),
        title=name,
        identifiers=_present(
            {
                "sku": sku,
                "gtin": _gtin(item),
                "mpn": text(item.get("mpn"), "mpn"),
                "brand": _brand(item.get("brand")),
            }
        ),
        attributes=_present(
            {
                "description": text(item.get("description"), "description"),
                "colour": text(item.get("color"), "color"),
                "size": text(item.get("size"), "size"),
                "material": text(item.get("material"), "material"),
                "weight": price(weight.get("value"), "weight.value"),
                "weight_unit": text(weight.get("unitCode"), "weight.unitCode"),
                "canonical_url": url,
            }
        ),
        offer=_present(offer),
        locator=node.locator,
    )


def _present(values: dict[str, str | None]) -> dict[str, str]:
    return {key: value for key, value in values.items() if value is not None}


class HtmlJsonLdAdapter:
    name: str = NAME
    parser_version: int = PARSER_VERSIONS[NAME]
    source_fields: SourceFieldInventory[Any] | PendingInventory = INVENTORY

    def accepts(self, content_type: str) -> bool:
        return media_essence(content_type) in _DOCUMENT_TYPES | {RAW_ENVELOPE_CONTENT_TYPE}

    def parse(self, envelope: RawEnvelope) -> Extraction:
        page = _read_page(envelope.part(DOCUMENT_ROLE))
        live_offers = offers_by_sku(envelope)
        candidates = [node for node in page.nodes if node.is_product]
        if not candidates:
            raise NoProducts("the page states no schema.org Product in JSON-LD")
        products: list[ExtractedProduct] = []
        rejected: list[RejectedItem] = []
        seen: set[str] = set()
        for node in candidates:
            try:
                product = _product(node, live_offers)
                if product.source_item_id in seen:
                    raise DuplicateItem(
                        f"product {product.source_item_id!r} is stated twice on the page",
                    )
            except ItemProblem as problem:
                rejected.append(RejectedItem(node.locator, problem.code, problem.message))
                continue
            seen.add(product.source_item_id)
            products.append(product)
        return Extraction(self.name, self.parser_version, tuple(products), tuple(rejected))

    def list_source_fields(self, envelope: RawEnvelope) -> frozenset[str]:
        page = _read_page(envelope.part(DOCUMENT_ROLE))
        stated: set[str] = set()
        for node in page.nodes:
            if node.is_product:
                stated.update(leaf_paths(node.value, skip=_JSONLD_SYNTAX))
            else:
                stated.add(f"node:{node.types[0] if node.types else '(untyped)'}")
        stated.update(f"meta:{key}" for key in page.meta)
        stated.update(f"microdata:{prop}" for prop in page.itemprops)
        for role in envelope.roles:
            if role == OFFERS_ROLE:
                body = offers_body(envelope.part(role))
                stated.update(f"{role}:{path}" for path in leaf_paths(body))
            elif role != DOCUMENT_ROLE:
                stated.add(f"part:{role}")
        return frozenset(stated)
