"""A read API over the real product and control databases, and a way to put
projection rows of any generation there and choose the one that serves.

Rows are written as the applier writes them (``registry.apply``, search documents
included), and the serving generation is the live consumer's progress row, set here
directly as a cutover sets it.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from db.control.epochs import ensure_epoch
from db.settings import DatabaseSettings
from processors.projections import registry
from processors.serving.app import create_app
from processors.settings import ReadApiSettings
from schemas.events import (
    AggregateRef,
    AttributeDefined,
    AttributeValueSet,
    CatalogItemSplit,
    CatalogItemUpserted,
    Envelope,
    ListingMapped,
    Payload,
    ShippingPolicyVersioned,
)
from schemas.http.auth import token_hash
from schemas.ids import definition_id, value_id
from tests.unit.processors.builders import T0

LIVE = "product-applier"
SHADOW = "product-applier-rebuild"
TENANT, CATALOG = "t1", "c1"
VIEWER = "viewer-of-t1"  # viewer on t1
ADMIN_T2 = "admin-of-t2"  # admin on t2 only
TOKENS = f"{token_hash(VIEWER)}:t1=viewer,{token_hash(ADMIN_T2)}:t2=admin"
DECISION = uuid.UUID("00000000-0000-4000-8000-000000000001")


def read_api_settings(db: DatabaseSettings, **overrides: Any) -> ReadApiSettings:
    return ReadApiSettings(
        api_tokens=SecretStr(TOKENS),
        product_dsn=db.product_dsn,
        control_dsn=db.control_dsn,
        **overrides,
    )


def auth(token: str = VIEWER) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Catalog:
    """Projection rows of one stream (``tenant``/``catalog``, history epoch 1)."""

    conn: psycopg.Connection[Any]
    db: DatabaseSettings
    tenant: str = TENANT
    catalog: str = CATALOG
    _positions: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def epoch(self) -> int:
        with psycopg.connect(self.db.control_dsn, autocommit=True) as control:
            return ensure_epoch(control, self.tenant, self.catalog)

    def serve(self, generation: int, consumer: str = LIVE, position: int = 0) -> None:
        """The consumer's progress row names ``generation`` (one UPDATE, as a cutover)."""
        self.conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position, generation) VALUES (%s, %s, %s, 1, %s, %s)"
            " ON CONFLICT (consumer, tenant_id, catalog_id, history_epoch)"
            " DO UPDATE SET generation = excluded.generation, position = excluded.position",
            (consumer, self.tenant, self.catalog, position, generation),
        )

    def apply(self, generation: int, *events: Envelope) -> None:
        with self.conn.transaction():
            registry.apply(self.conn, generation, list(events))

    def _event(self, aggregate: AggregateRef, payload: Payload) -> Envelope:
        return Envelope(
            tenant_id=self.tenant,
            catalog_id=self.catalog,
            history_epoch=1,
            position=next(self._positions),
            event_id=uuid.uuid4(),
            aggregate=aggregate,
            occurred_at=T0,
            payload=payload,
        )

    def item(
        self,
        item_id: str,
        title: str,
        *,
        revision: int = 1,
        status: str = "active",
        attributes: Mapping[str, str] | None = None,
        class_id: str = "shoes",
    ) -> Envelope:
        return self._event(
            AggregateRef(type="catalog_item", id=item_id, revision=revision),
            CatalogItemUpserted(
                class_id=class_id, status=status, title=title, attributes=attributes or {}
            ),
        )

    def definition(self, key: str, label: str, version: int = 1) -> Envelope:
        return self._event(
            AggregateRef(type="attribute_definition", id=definition_id(key, version), revision=1),
            AttributeDefined(
                attribute_key=key,
                version=version,
                label=label,
                value_type="text",
                applies_to=("shoes",),
                status="published",
                decision_id=DECISION,
            ),
        )

    def value(self, item_id: str, key: str, value: str, revision: int = 1) -> Envelope:
        return self._event(
            AggregateRef(type="attribute_value", id=value_id(item_id, key), revision=revision),
            AttributeValueSet(
                item_id=item_id,
                item_revision=1,
                attribute_key=key,
                definition_version=1,
                value_type="text",
                value=value,
                decision_id=DECISION,
            ),
        )

    def mapping(self, listing_id: str, item_id: str) -> Envelope:
        return self._event(
            AggregateRef(type="listing_mapping", id=listing_id, revision=1),
            ListingMapped(item_id=item_id, item_revision=1, decision_id=DECISION),
        )

    def split(self, split_id: uuid.UUID, source: str, successors: tuple[str, ...]) -> Envelope:
        return self._event(
            AggregateRef(type="item_split", id=str(split_id), revision=1),
            CatalogItemSplit(
                source_item_id=source,
                source_revision=2,
                successor_item_ids=successors,
                remaps={f"L-{s}": s for s in successors},
                decision_id=DECISION,
            ),
        )

    def policy(
        self,
        policy_id: str,
        version: int,
        scope: str,
        start: datetime,
        end: datetime | None = None,
    ) -> Envelope:
        return self._event(
            AggregateRef(type="shipping_policy", id=policy_id, revision=version),
            ShippingPolicyVersioned(
                scope=scope,
                effective_from=start,
                effective_to=end,
                terms={"carrier": f"c{version}"},
                decision_id=DECISION,
            ),
        )


@pytest.fixture()
def catalog(clean_db: DatabaseSettings) -> Iterator[Catalog]:
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        yield Catalog(conn, clean_db)


@pytest.fixture()
def client(clean_db: DatabaseSettings) -> Iterator[TestClient]:
    with TestClient(create_app(read_api_settings(clean_db))) as client:
        yield client


def ok(response: Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def error(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"code", "message"}
    return str(body["code"])
