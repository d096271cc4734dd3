"""Decode and follow a topic, as an analyst would."""

from __future__ import annotations

from typing import Any

import click

from infra.cli.output import echo, guarded
from infra.config import load


def _start(_ctx: click.Context, _param: click.Parameter, value: str) -> Any:
    from infra.tail import parse_start

    try:
        return parse_start(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.option("--tenant", help="Only this tenant.")
@click.option("--catalog", help="Only this catalog.")
@click.option("--type", "event_type", help="Only this event type, e.g. catalog_item.retired.")
@click.option("--aggregate-type", help="Only events of this aggregate type, e.g. catalog_item.")
@click.option("--aggregate-id", help="Only events of this aggregate id.")
@click.option(
    "--from",
    "start",
    default="end",
    show_default=True,
    callback=_start,
    metavar="beginning|end|POSITION|TIME",
    help="Where to start: the oldest retained message; what arrives from now; a stream"
    " position (digits; needs --tenant and --catalog: every partition is scanned from"
    " its oldest message to the stream's first event at or after it, with progress on"
    " stderr); or an ISO 8601 time such as 2027-01-01T12:00:00+00:00 (no zone: UTC),"
    " which Kafka's offsets_for_times turns into each partition's first message stored"
    " at or after it.",
)
@click.option("--from-beginning", is_flag=True, help="Same as --from beginning.")
@click.option("--follow/--no-follow", default=True, show_default=True, help="Keep waiting.")
@click.option("--limit", type=int, help="Stop after this many events.")
@click.option("--topic", help="Topic to read (default: GAPLESS_EVENTS_TOPIC).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, with every field.")
def tail(
    tenant: str | None,
    catalog: str | None,
    event_type: str | None,
    aggregate_type: str | None,
    aggregate_id: str | None,
    start: Any,
    from_beginning: bool,
    follow: bool,
    limit: int | None,
    topic: str | None,
    as_json: bool,
) -> None:
    """Decode and print events from the events topic: partition, offset, stream,
    position, type, aggregate, key and headers, as an aligned table or JSON lines.

    Reads with the GAPLESS_KAFKA_* settings (read-only credentials are enough),
    assigns the partitions itself and commits nothing: it never joins the agents'
    consumer group.
    """
    from infra.tail import StreamPosition, TailFilter, dumps, table_header, table_line
    from infra.tail import tail as follow_topic
    from schemas.exceptions import CodecError
    from schemas.settings import KafkaSettings

    if from_beginning:
        start = "beginning"
    if isinstance(start, StreamPosition) and (tenant is None or catalog is None):
        raise click.UsageError("--from POSITION needs --tenant and --catalog")
    settings = guarded(lambda: load(KafkaSettings))

    def undecodable(partition: int, offset: int, exc: CodecError) -> None:
        echo(f"p{partition} o{offset}: cannot decode ({exc})")

    records = follow_topic(
        settings.client_config(),
        topic or settings.events_topic,
        TailFilter(tenant, catalog, event_type, aggregate_type, aggregate_id),
        start,
        follow,
        limit,
        undecodable,
        progress=echo,
    )
    try:
        if not as_json:
            click.echo(table_header())
        for record in records:
            click.echo(dumps(record) if as_json else table_line(record))
    except KeyboardInterrupt:
        pass
