"""Shadow rebuilds: ask for one through the control topic, follow them, cancel one."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import click

from infra.cli.output import actor, echo, emit, fail, guarded
from infra.config import load


def _publish(command: Any) -> None:
    """Put one command on the control topic and wait for the broker's confirmation."""
    from confluent_kafka import KafkaException, Producer

    from schemas import control
    from schemas.settings import KafkaSettings
    from schemas.topics import CONTROL_TOPIC

    settings = guarded(lambda: load(KafkaSettings))
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True})
    problems: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            problems.append(str(err))

    try:
        producer.produce(
            CONTROL_TOPIC, key=command.key(), value=control.encode(command), on_delivery=delivered
        )
        left = producer.flush(15)
    except KafkaException as exc:
        fail(RuntimeError(f"the control topic did not take the command: {exc}"))
    if left or problems:
        fail(
            RuntimeError(
                f"the control topic did not confirm the command ({problems or 'timed out'});"
                " is Kafka up (`gapless status`)? Nothing was started."
            )
        )


def _record(row: Any) -> dict[str, Any]:
    return {
        "rebuild_id": str(row.rebuild_id),
        "stream": str(row.stream),
        "consumer": row.consumer,
        "phase": row.phase,
        "attempt": row.attempt,
        "generation": row.generation,
        "export_position": row.export_position,
        "chunks_loaded": row.chunks_loaded,
        "chunks_total": row.chunks_total,
        "rows_loaded": row.rows_loaded,
        "requested_by": row.requested_by,
        "reason": row.reason,
        "error_code": row.error_code,
        "error_message": row.error_message,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
    }


def _line(row: Any) -> str:
    error = f"  {row.error_code}: {row.error_message}" if row.error_code else ""
    return (
        f"{row.rebuild_id}  {row.stream!s:<28} {row.phase:<12} attempt {row.attempt}"
        f"  loaded {row.chunks_loaded}/{row.chunks_total} chunks ({row.rows_loaded} rows)"
        f"  W={row.export_position if row.export_position is not None else '-'}{error}"
    )


@click.group(invoke_without_command=True)
@click.option("--tenant", help="The tenant whose catalog to rebuild.")
@click.option("--catalog", help="The catalog to rebuild.")
@click.option(
    "--consumer", help="Whose projections (default: the agents' GAPLESS_AGENTS_CONSUMER)."
)
@click.option("--reason", default="", help="Why, for the audit trail.")
@click.option("--json", "as_json", is_flag=True, help="Print the request as one JSON object.")
@click.pass_context
def rebuild(
    ctx: click.Context,
    tenant: str | None,
    catalog: str | None,
    consumer: str | None,
    reason: str,
    as_json: bool,
) -> None:
    """Ask the agents to rebuild a catalog's projections in a shadow generation
    (published on the control topic; prints the rebuild's id). Then `gapless rebuild
    status ID` follows it and `gapless rebuild cancel ID` stops it."""
    if ctx.invoked_subcommand is not None:
        return
    if not tenant or not catalog:
        raise click.UsageError("give --tenant and --catalog (or a subcommand: status, cancel)")
    from schemas.control import ControlCommand

    command = ControlCommand(
        command_id=uuid.uuid4(),
        kind="rebuild",
        tenant_id=tenant,
        catalog_id=catalog,
        consumer=consumer,
        requested_by=actor(),
        reason=reason,
        requested_at=datetime.now(UTC),
    )
    _publish(command)
    emit(
        as_json,
        {"rebuild_id": str(command.command_id), "tenant_id": tenant, "catalog_id": catalog},
        str(command.command_id),
    )
    echo(f"requested; follow it with `gapless rebuild status {command.command_id}`")


@rebuild.command("status")
@click.argument("rebuild_id", required=False, type=click.UUID)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per rebuild.")
def rebuild_status(rebuild_id: uuid.UUID | None, as_json: bool) -> None:
    """One rebuild's phase and progress, or the 50 most recent."""
    import psycopg

    from db import rebuilds as sql
    from db.settings import DatabaseSettings

    settings = guarded(lambda: load(DatabaseSettings))
    with psycopg.connect(settings.product_dsn) as conn:
        if rebuild_id is None:
            rows = sql.recent(conn)
        else:
            one = sql.get(conn, rebuild_id)
            if one is None:
                fail(
                    LookupError(
                        f"no rebuild {rebuild_id} (it appears once an agent has read"
                        " the request from the control topic)"
                    )
                )
            rows = [one]
    for row in rows:
        emit(as_json, _record(row), _line(row))
    if not rows and not as_json:
        echo("no rebuilds")


@rebuild.command("cancel")
@click.argument("rebuild_id", type=click.UUID)
@click.option("--reason", default="", help="Why, for the audit trail.")
def rebuild_cancel(rebuild_id: uuid.UUID, reason: str) -> None:
    """Stop an unfinished rebuild (through the control topic): its shadow is never
    served, its lease expires on its own."""
    import psycopg

    from db import rebuilds as sql
    from db.settings import DatabaseSettings
    from schemas.control import ControlCommand

    settings = guarded(lambda: load(DatabaseSettings))
    with psycopg.connect(settings.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
    if row is None:
        fail(LookupError(f"no rebuild {rebuild_id}"))
    _publish(
        ControlCommand(
            command_id=uuid.uuid4(),
            kind="cancel",
            tenant_id=row.stream.tenant_id,
            catalog_id=row.stream.catalog_id,
            consumer=row.consumer,
            rebuild_id=rebuild_id,
            requested_by=actor(),
            reason=reason,
            requested_at=datetime.now(UTC),
        )
    )
    echo(f"cancel of {rebuild_id} requested; `gapless rebuild status {rebuild_id}` shows it")
