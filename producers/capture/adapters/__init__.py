"""Source adapters: one per source format, each declaring its source-field inventory
and its parser version. See ``inventory`` for the contract and ``registry`` for the
registered adapters."""

from producers.capture.adapters.base import (
    ExtractedProduct,
    Extraction,
    RejectedItem,
    SourceAdapter,
    product_fingerprint,
)
from producers.capture.adapters.inventory import (
    PENDING_SOURCE_FIELD_INVENTORY,
    Excluded,
    PendingInventory,
    SourceFieldInventory,
    Stored,
    excluded,
)
from producers.capture.adapters.registry import (
    ADAPTERS,
    CLAIM_FIELDS,
    adapter_named,
    reparse_stored_raw,
)
from producers.capture.adapters.versions import PARSER_VERSIONS

__all__ = [
    "ADAPTERS",
    "CLAIM_FIELDS",
    "PARSER_VERSIONS",
    "PENDING_SOURCE_FIELD_INVENTORY",
    "Excluded",
    "ExtractedProduct",
    "Extraction",
    "PendingInventory",
    "RejectedItem",
    "SourceAdapter",
    "SourceFieldInventory",
    "Stored",
    "adapter_named",
    "excluded",
    "product_fingerprint",
    "reparse_stored_raw",
]
