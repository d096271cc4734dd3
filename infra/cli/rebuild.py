"""Shadow rebuilds: ask for one through the control topic, follow them, cancel one."""

from __future__ import annotations

import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import click

from infra.cli.output import actor, echo, emit, fail, guarded, resolver_conn
from infra.config import load


def _publish(command: Any) -> None:
    """Put one command on the control topic and wait for the broker's confirmation."""
    from infra.control import ControlTopicUnavailable, publish
    from schemas.settings import KafkaSettings

    settings = guarded(lambda: load(KafkaSettings))
    try:
        publish(settings.client_config(), command, settings.control_topic)
    except ControlTopicUnavailable as exc:
        fail(exc)


@click.group(invoke_without_command=True)
@click.option("--tenant", help="The tenant whose catalog to rebuild.")
@click.option("--catalog", help="The catalog to rebuild.")
@click.option(
    "--consumer", help="Whose projections (default: the agents' GAPLESS_AGENTS_CONSUMER)."
)
@click.option("--reason", default="", help="Why, for the audit trail.")
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the rebuild until it ends, showing its progress; exit 1 if it fails,"
    " 3 if it was not started.",
)
@click.option(
    "--timeout",
    type=float,
    default=3600.0,
    show_default=True,
    help="With --wait: give up following after this many seconds (exit 4; the rebuild goes on).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the request as one JSON object.")
@click.pass_context
def rebuild(
    ctx: click.Context,
    tenant: str | None,
    catalog: str | None,
    consumer: str | None,
    reason: str,
    wait: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Ask the agents to rebuild a catalog's projections in a shadow generation
    (published on the control topic; prints the rebuild's id). `--wait` follows it to
    the end; `gapless rebuild status ID` shows it and `gapless rebuild cancel ID`
    stops it."""
    if ctx.invoked_subcommand is not None:
        return
    if not tenant or not catalog:
        raise click.UsageError("give --tenant and --catalog (or a subcommand: status, cancel)")
    from infra.control import rebuild_command

    command = rebuild_command(tenant, catalog, actor(), reason, consumer)
    answers = StatusWatch() if wait else None
    _publish(command)
    emit(
        as_json,
        {"rebuild_id": str(command.command_id), "tenant_id": tenant, "catalog_id": catalog},
        str(command.command_id),
    )
    if answers is None:
        echo(f"requested; follow it with `gapless rebuild status {command.command_id}`")
        return
    sys.exit(follow_rebuild(command.command_id, answers, timeout, as_json))


class StatusWatch:
    """The status topic from now on, to hear a refusal (a request that makes no
    rebuild row: the catalog is already rebuilding, or it has no history)."""

    def __init__(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from schemas.settings import KafkaSettings

        settings = guarded(lambda: load(KafkaSettings))
        status_topic = settings.rebuild_status_topic
        self._consumer = Consumer(
            settings.client_config(
                {
                    "group.id": f"gapless-rebuild-wait-{uuid.uuid4()}",
                    "enable.auto.commit": False,
                }
            )
        )
        now_ms = int(time.time() * 1000) - 1000
        topic = self._consumer.list_topics(status_topic, timeout=10).topics
        partitions = list(topic[status_topic].partitions) if topic else [0]
        wanted = [TopicPartition(status_topic, p, now_ms) for p in partitions]
        found = self._consumer.offsets_for_times(wanted, timeout=10)
        # No event since then reads as "the end", which the broker would resolve only
        # at the first fetch, after the request is published, and so skip an answer
        # written meanwhile: pin it to the end offset as it is now.
        for tp in found:
            if tp.offset < 0:
                tp.offset = self._consumer.get_watermark_offsets(tp, timeout=10)[1]
        self._consumer.assign(found)

    def refusal(self, rebuild_id: uuid.UUID) -> Any:
        from schemas.control import decode_status
        from schemas.exceptions import CodecError

        for message in self._consumer.consume(100, timeout=0.2):
            value = message.value()
            if message.error() is not None or value is None:
                continue
            try:
                status = decode_status(value)
            except CodecError:
                continue
            if status.rebuild_id == rebuild_id and status.phase == "rejected":
                return status
        return None

    def close(self) -> None:
        self._consumer.close()


def follow_rebuild(
    rebuild_id: uuid.UUID, answers: StatusWatch, timeout: float, as_json: bool
) -> int:
    """Show each change of the rebuild until it ends; the exit code."""
    import psycopg

    from db.product import rebuilds as sql
    from db.settings import DatabaseSettings
    from infra import rebuild_text as text

    settings = guarded(lambda: load(DatabaseSettings))
    deadline = time.monotonic() + timeout
    last: tuple[Any, ...] | None = None
    shown = 0.0
    tty = sys.stderr.isatty() and not as_json
    try:
        with psycopg.connect(settings.product_dsn, autocommit=True) as conn:
            while True:
                row = sql.get(conn, rebuild_id)
                if row is None:
                    refused = answers.refusal(rebuild_id)
                    if refused is not None:
                        echo(f"not started: {refused.error_code}: {refused.error_message}")
                        return 3
                else:
                    extra = text.resolver_side(row, resolver_conn)
                    # A line each time the row changes; on a terminal, the ETA
                    # counting down in place every few seconds between changes.
                    changed = (row.updated_at, row.phase, tuple(sorted(extra.items())))
                    if changed != last or (tty and time.monotonic() - shown >= 5):
                        now = datetime.now(UTC)
                        if as_json:
                            emit(True, text.record(row, now, extra), "")
                        else:
                            shown_line = text.line(row, now, extra)
                            click.echo(
                                ("\r\033[K" if tty else "") + shown_line, err=True, nl=not tty
                            )
                        last, shown = changed, time.monotonic()
                    if row.phase in ("done", "failed", "cancelled"):
                        if tty:
                            click.echo("", err=True)
                        return 0 if row.phase == "done" else 1
                if time.monotonic() >= deadline:
                    echo(f"stopped following after {timeout:.0f}s; the rebuild goes on")
                    return 4
                time.sleep(0.5)
    finally:
        answers.close()


@rebuild.command("status")
@click.argument("rebuild_id", required=False, type=click.UUID)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per rebuild.")
def rebuild_status(rebuild_id: uuid.UUID | None, as_json: bool) -> None:
    """One rebuild's phase and progress (rows loaded of the export's, the share of the
    work done, its rate and ETA), or the 50 most recent."""
    import psycopg

    from db.product import rebuilds as sql
    from db.settings import DatabaseSettings
    from infra import rebuild_text as text

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
    now = datetime.now(UTC)
    for row in rows:
        emit(as_json, text.record(row, now), text.line(row, now))
    if not rows and not as_json:
        echo("no rebuilds")


@rebuild.command("cancel")
@click.argument("rebuild_id", type=click.UUID)
@click.option("--reason", default="", help="Why, for the audit trail.")
def rebuild_cancel(rebuild_id: uuid.UUID, reason: str) -> None:
    """Stop an unfinished rebuild (through the control topic): its shadow is never
    served; the agents then release its lease and remove its rows. A rebuild that is
    cutting over can no longer be cancelled."""
    import psycopg

    from db.product import rebuilds as sql
    from db.settings import DatabaseSettings
    from infra.control import cancel_command

    settings = guarded(lambda: load(DatabaseSettings))
    with psycopg.connect(settings.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
    if row is None:
        fail(LookupError(f"no rebuild {rebuild_id}"))
    _publish(
        cancel_command(
            rebuild_id,
            row.stream.tenant_id,
            row.stream.catalog_id,
            row.consumer,
            actor(),
            reason,
        )
    )
    echo(f"cancel of {rebuild_id} requested; `gapless rebuild status {rebuild_id}` shows it")
