"""Decode and follow a topic, as an analyst would."""

from __future__ import annotations

import click

from infra.cli.output import echo, guarded
from infra.config import load


@click.command()
@click.option("--tenant", help="Only this tenant.")
@click.option("--catalog", help="Only this catalog.")
@click.option("--type", "event_type", help="Only this event type, e.g. catalog_item.retired.")
@click.option("--from-beginning", is_flag=True, help="Start at the oldest retained message.")
@click.option("--follow/--no-follow", default=True, show_default=True, help="Keep waiting.")
@click.option("--limit", type=int, help="Stop after this many events.")
@click.option("--topic", help="Topic to read (default: GAPLESS_EVENTS_TOPIC).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def tail(
    tenant: str | None,
    catalog: str | None,
    event_type: str | None,
    from_beginning: bool,
    follow: bool,
    limit: int | None,
    topic: str | None,
    as_json: bool,
) -> None:
    """Decode and print events from the events topic (never joins the agents' group)."""
    from infra.tail import TailFilter, dumps, table_line
    from infra.tail import tail as follow_topic
    from schemas.exceptions import CodecError
    from schemas.settings import KafkaSettings

    settings = guarded(lambda: load(KafkaSettings))

    def undecodable(partition: int, offset: int, exc: CodecError) -> None:
        echo(f"p{partition} o{offset}: cannot decode ({exc})")

    records = follow_topic(
        settings.kafka_bootstrap,
        topic or settings.events_topic,
        TailFilter(tenant, catalog, event_type),
        from_beginning,
        follow,
        limit,
        undecodable,
    )
    try:
        for record in records:
            click.echo(dumps(record) if as_json else table_line(record))
    except KeyboardInterrupt:
        pass
