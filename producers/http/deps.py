"""Request dependencies of the resolver API (tiny ``Annotated`` aliases)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, cast

import psycopg
from fastapi import Depends, Request
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from db.resolver.commit_notifier import CommitNotifier
from db.unit_of_work import UnitOfWork
from schemas.codec import CODEC, EventCodec


@dataclass(frozen=True, slots=True)
class Resources:
    """What the API process opened once at start-up (see ``producers.api``).

    ``pool`` is in autocommit mode (each operation runs its own short transactions);
    ``uow_pool`` is not: a Unit of Work owns one transaction on one of its
    connections from the first statement to ``commit()`` or rollback.
    ``claim_fields`` are the names captured products can state, which an identity
    rule may name (from the capture adapters' inventories). ``codec`` frames the
    events (``schemas.registry_codec.codec_for``: the settings choose the framing).
    """

    pool: ConnectionPool
    uow_pool: ConnectionPool
    epochs: EpochSource
    lease_max_ttl_seconds: int
    claim_fields: frozenset[str]
    pauses: PauseWatch | None = None
    notifier: CommitNotifier | None = None
    codec: EventCodec = CODEC

    def unit_of_work(self) -> UnitOfWork:
        """A unit of work that refuses paused catalogs (``STREAM_PAUSED``, 503) and
        wakes the relay after its commit (``db.resolver.commit_notifier``)."""
        return UnitOfWork(self.uow_pool, self.epochs, self.codec, self.pauses, self.notifier)


def resources(request: Request) -> Resources:
    return cast(Resources, request.app.state.resources)


def connection(request: Request) -> Iterator[psycopg.Connection]:
    """A resolver connection for one request. The pool's connections are in
    autocommit mode: each operation opens and commits its own transactions, so a
    lock is never held past the operation that needed it."""
    with resources(request).pool.connection() as conn:
        yield conn


Conn = Annotated[psycopg.Connection, Depends(connection)]
Res = Annotated[Resources, Depends(resources)]
