"""Request and response bodies of the retention endpoints (the OpenAPI contract)."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime

from pydantic import BaseModel, Field

from db.resolver.retention import LeaseRow
from db.resolver.stream_positions import StreamPositions
from producers.retention.report import StreamRetention
from producers.retention.retained import EventPage
from schemas.http.params import MAX_INT8


class ConsumerRegistered(BaseModel):
    tenant_id: str
    catalog_id: str
    history_epoch: int
    consumer_id: str
    reported_position: int | None = Field(description="null until the first report")
    pruned_through: int = Field(
        description="Events above this position are retained for the consumer from now on."
    )


class ProgressReport(BaseModel):
    position: int = Field(
        ge=0, le=MAX_INT8, description="Every position up to this one is durably applied."
    )


class ProgressHeld(BaseModel):
    reported_position: int = Field(description="The progress now held (never lower than before).")


class RetainedEvent(BaseModel):
    position: int
    event_id: uuid.UUID
    event_type: str
    key: str = Field(description="base64 of the stored Kafka key bytes")
    value: str = Field(description="base64 of the stored Kafka value bytes (the encoded event)")


class EventPageBody(BaseModel):
    tenant_id: str
    catalog_id: str
    history_epoch: int
    committed_position: int
    pruned_through: int
    events: list[RetainedEvent] = Field(description="In position order, consecutive.")

    @classmethod
    def of(cls, page: EventPage) -> EventPageBody:
        return cls(
            tenant_id=page.stream.tenant_id,
            catalog_id=page.stream.catalog_id,
            history_epoch=page.stream.history_epoch,
            committed_position=page.committed_position,
            pruned_through=page.pruned_through,
            events=[
                RetainedEvent(
                    position=e.position,
                    event_id=e.event_id,
                    event_type=e.event_type,
                    key=base64.b64encode(e.key).decode(),
                    value=base64.b64encode(e.value).decode(),
                )
                for e in page.events
            ],
        )


class StreamPosition(BaseModel):
    tenant_id: str
    catalog_id: str
    history_epoch: int
    committed_position: int
    published_position: int
    pruned_through: int

    @classmethod
    def of(cls, p: StreamPositions) -> StreamPosition:
        return cls(
            tenant_id=p.stream.tenant_id,
            catalog_id=p.stream.catalog_id,
            history_epoch=p.stream.history_epoch,
            committed_position=p.committed,
            published_position=p.published,
            pruned_through=p.pruned_through,
        )


class StreamPage(BaseModel):
    streams: list[StreamPosition] = Field(description="In (tenant, catalog, epoch) order.")
    more: bool = Field(
        description="true: ask again with after_tenant/after_catalog/after_epoch set to the"
        " last stream's."
    )


class LeaseRequest(BaseModel):
    tenant_id: str = Field(min_length=1, max_length=200)
    catalog_id: str = Field(min_length=1, max_length=200)
    history_epoch: int = Field(ge=1, le=MAX_INT8)
    holder: str = Field(min_length=1, max_length=200, description="Who rebuilds (for operators).")
    ttl_seconds: int = Field(ge=1, description="Seconds until the lease expires unless renewed.")


class LeaseRenewal(BaseModel):
    ttl_seconds: int | None = Field(default=None, ge=1, description="Default: the last TTL.")


class LeaseAdvance(BaseModel):
    position: int = Field(
        ge=0, le=MAX_INT8, description="The new pin; a lower one leaves the pin as it is."
    )


class Lease(BaseModel):
    lease_id: uuid.UUID
    tenant_id: str
    catalog_id: str
    history_epoch: int
    holder: str
    pinned_position: int
    expires_at: datetime
    ttl_seconds: int

    @classmethod
    def of(cls, row: LeaseRow) -> Lease:
        return cls(
            lease_id=row.lease_id,
            tenant_id=row.stream.tenant_id,
            catalog_id=row.stream.catalog_id,
            history_epoch=row.stream.history_epoch,
            holder=row.holder,
            pinned_position=row.pinned_position,
            expires_at=row.expires_at,
            ttl_seconds=row.ttl_seconds,
        )


class FloorHolder(BaseModel):
    kind: str = Field(description="consumer or lease")
    name: str
    position: int


class RetentionFloor(BaseModel):
    position: int
    held_by: FloorHolder
    held_back: int = Field(description="Published positions the floor keeps from pruning.")
    description: str | None = Field(description="Set when the floor is blocking pruning.")


class ConsumerProgress(BaseModel):
    consumer_id: str
    reported_position: int | None
    lag: int = Field(description="Committed cursor minus reported progress.")
    registered_at: datetime = Field(
        description="For a standing consumer not registered on the stream: when it was declared."
    )
    reported_at: datetime | None
    standing: bool = Field(
        description="Held as a standing consumer, without a registration on this stream."
    )
    needs_rebuild_since: datetime | None = Field(
        description="Set when its first report fell below pruned_through (CONSUMER_NEEDS_REBUILD)."
    )
    refused_position: int | None = Field(description="The position that report named.")


class LeaseExpiry(BaseModel):
    lease_id: uuid.UUID
    holder: str
    pinned_position: int
    expires_at: datetime
    seconds_to_expiry: float
    expired: bool


class StreamState(BaseModel):
    tenant_id: str
    catalog_id: str
    history_epoch: int
    committed_position: int
    published_position: int
    pruned_through: int
    floor: RetentionFloor | None = Field(description="null: no consumer and no live lease.")
    consumers: list[ConsumerProgress]
    leases: list[LeaseExpiry] = Field(description="Unreleased leases, expired ones included.")

    @classmethod
    def of(cls, s: StreamRetention) -> StreamState:
        floor = None
        if s.held_by is not None:
            floor = RetentionFloor(
                position=s.held_by.position,
                held_by=FloorHolder(
                    kind=s.held_by.kind, name=s.held_by.name, position=s.held_by.position
                ),
                held_back=s.held_back,
                description=s.blocker,
            )
        return cls(
            tenant_id=s.tenant_id,
            catalog_id=s.catalog_id,
            history_epoch=s.history_epoch,
            committed_position=s.committed,
            published_position=s.published,
            pruned_through=s.pruned_through,
            floor=floor,
            consumers=[
                ConsumerProgress(
                    consumer_id=c.consumer_id,
                    reported_position=c.reported_position,
                    lag=c.lag,
                    registered_at=c.registered_at,
                    reported_at=c.reported_at,
                    standing=c.standing,
                    needs_rebuild_since=c.needs_rebuild_since,
                    refused_position=c.refused_position,
                )
                for c in s.consumers
            ],
            leases=[
                LeaseExpiry(
                    lease_id=x.lease_id,
                    holder=x.holder,
                    pinned_position=x.pinned_position,
                    expires_at=x.expires_at,
                    seconds_to_expiry=x.seconds_to_expiry,
                    expired=x.expired,
                )
                for x in s.leases
            ],
        )
