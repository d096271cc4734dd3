"""Every registered source adapter, by name, and the reparse of stored raw."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from producers.capture.adapters.base import Extraction, SourceAdapter
from producers.capture.adapters.html_jsonld import HtmlJsonLdAdapter
from producers.capture.adapters.inventory import SourceFieldInventory
from producers.capture.adapters.json_feed import JsonFeedAdapter
from producers.capture.adapters.versions import PARSER_VERSIONS
from producers.capture.exceptions import UnknownAdapter
from producers.capture.raw import envelope_of_capture

_REGISTERED: tuple[SourceAdapter, ...] = (JsonFeedAdapter(), HtmlJsonLdAdapter())

ADAPTERS: Final[Mapping[str, SourceAdapter]] = MappingProxyType(
    {adapter.name: adapter for adapter in _REGISTERED}
)
assert set(ADAPTERS) == set(PARSER_VERSIONS), "every adapter has exactly one parser version"

CLAIM_FIELDS: Final[frozenset[str]] = frozenset(
    name
    for adapter in _REGISTERED
    if isinstance(adapter.source_fields, SourceFieldInventory)
    for name in adapter.source_fields.claim_fields()
)
"""Every name a captured product can carry for an identity rule to match (the title,
its identifiers and attributes), by the registered adapters' inventories. An adapter
without an inventory would add none; none may be without one
(``source-field-inventory-baseline.json`` is empty and may only shrink)."""


def adapter_named(name: str) -> SourceAdapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise UnknownAdapter(name, tuple(sorted(ADAPTERS))) from None


def reparse_stored_raw(
    adapter: SourceAdapter, stored: bytes | None, content_type: str, source_url: str
) -> Extraction | None:
    """Parse a stored capture again with ``adapter``'s current parser.

    ``stored`` is what the evidence store holds for the capture, ``content_type`` what
    it was posted as: a raw envelope decodes to its parts; any other artifact (one
    response, or a capture stored before envelopes existed) is its one ``document``
    part. None (nothing stored) answers None. The extraction reads only what was kept:
    a part a collector never posted cannot be backfilled by a reparse.
    """
    if stored is None:
        return None
    return adapter.parse(envelope_of_capture(content_type, stored, source_url))
