"""Quarantine holds a stream's progress until an operator retries or skips it,
while other streams keep flowing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from processors.applier.batch import Applier
from processors.applier.exceptions import EntryNotOpen, QuarantineRepairError
from processors.applier.messages import RawMessage
from processors.applier.repair import list_entries, retry, skip
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemUpserted, Envelope

_offsets = iter(range(1_000_000))


def _message(tenant: str, position: int, title: str = "lamp", epoch: int = 1) -> RawMessage:
    event = Envelope(
        tenant_id=tenant,
        catalog_id="c1",
        history_epoch=epoch,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id=f"item{position}", revision=1),
        occurred_at=datetime.now(UTC),
        payload=CatalogItemUpserted(class_id="lamp", status="active", title=title),
    )
    return RawMessage(
        "events", 0, next(_offsets), CODEC.encode_key(event.key), CODEC.encode_value(event)
    )


def _progress(settings: DatabaseSettings) -> dict[str, int]:
    with psycopg.connect(settings.product_dsn) as conn:
        rows = conn.execute("SELECT tenant_id, position FROM stream_progress").fetchall()
    return {t: p for t, p in rows}


@pytest.fixture()
def applier(clean_db: DatabaseSettings) -> Applier:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, "t1", "c1")
        ensure_epoch(conn, "t2", "c1")
    return Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn, ttl_seconds=0), CODEC)


def test_poison_event_holds_its_stream_until_skipped(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    # PostgreSQL text cannot hold NUL: this event can never be applied.
    poison = _message("t1", 2, title="bad\x00title")
    applier.apply([_message("t1", 1), poison, _message("t1", 3), _message("t2", 1)])
    applier.apply([_message("t2", 2)])

    assert _progress(clean_db) == {"t1": 1, "t2": 2}
    [entry] = list_entries(psycopg.connect(clean_db.product_dsn))
    assert entry.error_code.startswith("APPLY_FAILED")
    assert entry.position == 2 and entry.offset == poison.offset

    assert retry(clean_db.product_dsn, applier, entry.id, "tester") is False
    assert _progress(clean_db)["t1"] == 1

    with pytest.raises(QuarantineRepairError):
        skip(clean_db.product_dsn, entry.id, "  ", "tester")
    assert skip(clean_db.product_dsn, entry.id, "title unfixable at source", "tester") == 3
    assert _progress(clean_db) == {"t1": 3, "t2": 2}
    [done] = list_entries(psycopg.connect(clean_db.product_dsn), status="skipped")
    assert done.resolution == "skipped by tester: title unfixable at source"
    with pytest.raises(EntryNotOpen):
        skip(clean_db.product_dsn, entry.id, "again", "tester")


def test_unknown_epoch_is_quarantined_and_retried_once_issued(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    early = _message("t3", 1)
    result = applier.apply([early, _message("t1", 1)])
    assert result.quarantined == 1 and result.applied == 1
    [entry] = list_entries(psycopg.connect(clean_db.product_dsn))
    assert entry.error_code == "EPOCH_UNKNOWN"

    assert retry(clean_db.product_dsn, applier, entry.id, "tester") is False
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, "t3", "c1")
    assert retry(clean_db.product_dsn, applier, entry.id, "tester") is True
    assert _progress(clean_db)["t3"] == 1
    assert list_entries(psycopg.connect(clean_db.product_dsn)) == []
