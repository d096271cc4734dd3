"""The path parameters of both APIs, one ``Annotated`` alias each.

Every route, the resolver's and the read API's, takes its path parameters from here,
so a tenant, a catalog or an item id is bounded (and documented in the OpenAPI
schema) the same way wherever it appears. Query parameters stay with the routes that read them.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Path

from schemas.ids import CONSUMER_ID

MAX_ID = 200
MAX_INT4 = 2**31 - 1
"""Versions and generation numbers are PostgreSQL ``integer`` columns."""
MAX_INT8 = 2**63 - 1
"""History epochs and positions are PostgreSQL ``bigint`` columns."""

Tenant = Annotated[str, Path(min_length=1, max_length=MAX_ID)]
Catalog = Annotated[str, Path(min_length=1, max_length=MAX_ID)]
ItemId = Annotated[str, Path(min_length=1, max_length=MAX_ID)]
CaseId = Annotated[str, Path(min_length=1, max_length=MAX_ID)]
ClassId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_ID,
        description="The item class; may contain '/' (adapters name nested categories"
        " so, e.g. 'outdoor/camping/tents').",
    ),
]
AttributeKey = Annotated[str, Path(min_length=1, max_length=MAX_ID)]
AttributeVersion = Annotated[int, Path(ge=1, le=MAX_INT4)]
GenerationNumber = Annotated[int, Path(ge=1, le=MAX_INT4)]
IdentityHash = Annotated[str, Path(pattern="^[0-9a-f]{64}$", description="SHA-256, hex.")]
HistoryEpoch = Annotated[int, Path(ge=1, le=MAX_INT8, description="The stream's history epoch.")]
ConsumerId = Annotated[
    str,
    Path(
        pattern=CONSUMER_ID.pattern,
        description="A stable name for the consumer (its durable progress is kept under it).",
    ),
]
LeaseId = Annotated[uuid.UUID, Path()]
ExportId = Annotated[uuid.UUID, Path()]
ReceiptId = Annotated[uuid.UUID, Path()]
