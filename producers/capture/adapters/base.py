"""What an adapter gives the worker: extracted products, per-item rejections, and the
adapter protocol itself."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from producers.capture.adapters.inventory import PendingInventory, SourceFieldInventory
from producers.capture.raw import RawEnvelope


def _frozen(values: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(sorted(values.items())))


def product_fingerprint(
    class_id: str,
    title: str,
    identifiers: Mapping[str, str],
    attributes: Mapping[str, str],
    offer: Mapping[str, str],
) -> str:
    """sha256 hex of the canonical JSON of the extracted content: equal content gives
    an equal fingerprint whatever order the mappings were built in. The parser version
    is not part of it; it belongs to the worker's result identity."""
    canonical = json.dumps(
        {
            "class_id": class_id,
            "title": title,
            "identifiers": dict(identifiers),
            "attributes": dict(attributes),
            "offer": dict(offer),
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,  # lone surrogates from JSON escapes stay encodable
    )
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


@dataclass(frozen=True, slots=True)
class ExtractedProduct:
    source_item_id: str  # stable id of the product within its source (sku, @id, url…)
    class_id: str
    title: str
    identifiers: Mapping[str, str]  # strong ids and identity fields: gtin, mpn, brand, sku…
    attributes: Mapping[str, str]  # other stated facts stored on the item
    offer: Mapping[str, str]  # price, currency, availability, url…
    locator: str  # where in the capture it was read ("<role>#<path>"): the evidence locator
    fingerprint: str  # product_fingerprint of the content above

    @classmethod
    def build(
        cls,
        *,
        source_item_id: str,
        class_id: str,
        title: str,
        identifiers: Mapping[str, str],
        attributes: Mapping[str, str],
        offer: Mapping[str, str],
        locator: str,
    ) -> ExtractedProduct:
        """A product with its fingerprint computed and its mappings frozen (sorted)."""
        return cls(
            source_item_id=source_item_id,
            class_id=class_id,
            title=title,
            identifiers=_frozen(identifiers),
            attributes=_frozen(attributes),
            offer=_frozen(offer),
            locator=locator,
            fingerprint=product_fingerprint(class_id, title, identifiers, attributes, offer),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "source_item_id": self.source_item_id,
            "class_id": self.class_id,
            "title": self.title,
            "identifiers": dict(self.identifiers),
            "attributes": dict(self.attributes),
            "offer": dict(self.offer),
            "locator": self.locator,
            "fingerprint": self.fingerprint,
        }


@dataclass(frozen=True, slots=True)
class RejectedItem:
    """One malformed product inside an otherwise good capture; the items after it are
    still extracted."""

    locator: str
    code: str  # stable: MISSING_FIELD, INVALID_FIELD, INVALID_GTIN, …
    message: str


@dataclass(frozen=True, slots=True)
class Extraction:
    adapter: str
    parser_version: int
    products: tuple[ExtractedProduct, ...]
    rejected: tuple[RejectedItem, ...]

    def as_json(self) -> dict[str, Any]:
        """A plain-JSON view (for golden files and logs)."""
        return {
            "adapter": self.adapter,
            "parser_version": self.parser_version,
            "products": [p.as_json() for p in self.products],
            "rejected": [
                {"locator": r.locator, "code": r.code, "message": r.message} for r in self.rejected
            ],
        }


class SourceAdapter(Protocol):
    name: str
    parser_version: int  # bumped whenever ``parse`` of the same raw answers differently
    source_fields: SourceFieldInventory[Any] | PendingInventory

    def accepts(self, content_type: str) -> bool:
        """Whether a capture of this media type (or a raw envelope) is for this adapter."""
        ...

    def parse(self, envelope: RawEnvelope) -> Extraction:
        """The products of a capture; ``AdapterError`` when the capture as a whole is
        unusable, a ``RejectedItem`` per malformed product otherwise."""
        ...

    def list_source_fields(self, envelope: RawEnvelope) -> frozenset[str]:
        """Every field the capture states, named as the inventory names them; a field
        the inventory lacks comes back under the name it would have."""
        ...
