"""Commands on the control topic, as an operator's tools put them there: every
command is built here (``rebuild_command``, ``cancel_command``, ``pause_command``)
and published with ``publish``; the agents dispatch on its kind in one place
(``processors.rebuild.requests.accept``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from confluent_kafka import KafkaException, Producer

from schemas import control
from schemas.control import ControlCommand, Kind
from schemas.errors import GaplessError
from schemas.settings import KafkaConnection, client_config
from schemas.topics import CONTROL_TOPIC


class ControlTopicUnavailable(GaplessError):
    """The broker did not confirm the command: nothing was started."""

    code = "CONTROL_TOPIC_UNAVAILABLE"


def _command(
    kind: Kind,
    tenant: str,
    catalog: str,
    requested_by: str,
    reason: str,
    *,
    command_id: uuid.UUID | None = None,
    consumer: str | None = None,
    rebuild_id: uuid.UUID | None = None,
) -> ControlCommand:
    return ControlCommand(
        command_id=command_id or uuid.uuid4(),
        kind=kind,
        tenant_id=tenant,
        catalog_id=catalog,
        consumer=consumer,
        rebuild_id=rebuild_id,
        requested_by=requested_by,
        reason=reason,
        requested_at=datetime.now(UTC),
    )


def rebuild_command(
    tenant: str,
    catalog: str,
    requested_by: str,
    reason: str = "",
    consumer: str | None = None,
    command_id: uuid.UUID | None = None,
) -> ControlCommand:
    """A REBUILD request; ``command_id`` given when a repeat must be the same request
    (the agents carry out each id once)."""
    return _command(
        "rebuild", tenant, catalog, requested_by, reason, command_id=command_id, consumer=consumer
    )


def cancel_command(
    rebuild_id: uuid.UUID, tenant: str, catalog: str, consumer: str, requested_by: str, reason: str
) -> ControlCommand:
    """A CANCEL of one rebuild."""
    return _command(
        "cancel", tenant, catalog, requested_by, reason, consumer=consumer, rebuild_id=rebuild_id
    )


def pause_command(
    kind: Literal["pause", "resume"],
    pause_id: uuid.UUID,
    tenant: str,
    catalog: str,
    requested_by: str,
    reason: str,
) -> ControlCommand:
    """A PAUSE or RESUME announcement of a catalog pause (its id is the pause's)."""
    return _command(kind, tenant, catalog, requested_by, reason, command_id=pause_id)


def publish(
    kafka: KafkaConnection,
    command: ControlCommand,
    topic: str = CONTROL_TOPIC,
    timeout: float = 15.0,
) -> None:
    """Put one command on the control topic (``GAPLESS_CONTROL_TOPIC``) and wait for
    the broker's confirmation."""
    producer = Producer(client_config(kafka, {"enable.idempotence": True, "acks": "all"}))
    problems: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            problems.append(str(err))

    try:
        producer.produce(
            topic, key=command.key(), value=control.encode(command), on_delivery=delivered
        )
        left = producer.flush(timeout)
    except KafkaException as exc:
        raise ControlTopicUnavailable(f"the control topic did not take the command: {exc}") from exc
    finally:
        # A command not confirmed is given up here (the caller says so, and may send
        # it again): its producer must not live on in the traceback, retrying a
        # broker that is away and logging every attempt.
        producer.purge()
        del producer
    if left or problems:
        raise ControlTopicUnavailable(
            f"the control topic did not confirm the command ({problems or 'timed out'});"
            " is Kafka up (`gapless status`)? Nothing was started."
        )
