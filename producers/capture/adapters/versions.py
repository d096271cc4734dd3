"""Parser version of every adapter: the one place to bump.

Bump an adapter's entry whenever parsing the same raw answers differently (a new
field read, a changed normalisation, a product now rejected or now accepted); the
golden-extraction test fails until you do. The version is part of the worker's
result identity, so a reparse under a new version is new work, not a duplicate.
A reparse re-reads only what the stored raw kept: captures stored before a collector
posted a part hold what they held, and only a new capture adds to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

PARSER_VERSIONS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "json-feed": 1,
        "html-jsonld": 1,
    }
)
