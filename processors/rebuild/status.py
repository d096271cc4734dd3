"""Rebuild status events on ``catalog.rebuild-status.v1``: one after each committed
phase, and one answering each request that was not started.

Informational, for operators and dashboards: the rebuild row in the product
database is the truth, so a status event lost to a broker outage is logged and
never holds a rebuild up.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaException, Producer

from db.product.rebuilds import RebuildRow
from schemas import control
from schemas.control import ControlCommand, RebuildStatus
from schemas.settings import KafkaConnection, client_config
from schemas.topics import REBUILD_STATUS_TOPIC

log = logging.getLogger(__name__)


def of_row(row: RebuildRow) -> RebuildStatus:
    return RebuildStatus(
        rebuild_id=row.rebuild_id,
        tenant_id=row.stream.tenant_id,
        catalog_id=row.stream.catalog_id,
        history_epoch=row.stream.history_epoch,
        consumer=row.consumer,
        phase=row.phase,
        attempt=row.attempt,
        generation=row.generation,
        export_position=row.export_position,
        chunks_loaded=row.chunks_loaded,
        chunks_total=row.chunks_total,
        rows_loaded=row.rows_loaded,
        error_code=row.error_code,
        error_message=row.error_message,
        at=row.updated_at,
        target_position=row.target_position,
        caught_up_position=row.caught_up_position,
        cutover_pause_ms=row.cutover_pause_ms,
    )


def refusal(command: ControlCommand, consumer: str, code: str, message: str) -> RebuildStatus:
    """The answer to a REBUILD that was not started (phase ``rejected``)."""
    return RebuildStatus(
        rebuild_id=command.command_id,
        tenant_id=command.tenant_id,
        catalog_id=command.catalog_id,
        history_epoch=0,
        consumer=consumer,
        phase="rejected",
        attempt=0,
        chunks_loaded=0,
        chunks_total=0,
        rows_loaded=0,
        error_code=code,
        error_message=message,
        at=datetime.now(UTC),
    )


class StatusPublisher:
    def __init__(self, kafka: KafkaConnection, topic: str = REBUILD_STATUS_TOPIC) -> None:
        # Like every producer here: acks=all and idempotent, so on a cluster a status
        # event counts as sent once two replicas hold it, and a retry never doubles it.
        self._producer = Producer(
            client_config(kafka, {"linger.ms": 5, "enable.idempotence": True, "acks": "all"})
        )
        self._topic = topic

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            log.warning("rebuild status event not delivered: %s", err)

    def publish(self, status: RebuildStatus) -> None:
        try:
            self._producer.produce(
                self._topic,
                key=status.key(),
                value=control.encode_status(status),
                on_delivery=self._delivered,
            )
            self._producer.poll(0)
        except (BufferError, KafkaException) as exc:  # never hold a rebuild up
            log.warning("rebuild status event of %s not sent: %s", status.rebuild_id, exc)

    def row_changed(self, row: RebuildRow) -> None:
        self.publish(of_row(row))

    def flush(self, timeout: float = 5.0) -> int:
        return int(self._producer.flush(timeout))
