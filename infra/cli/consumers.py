"""Consumers registered with retention control: list, deregister."""

from __future__ import annotations

import click

from infra.cli.output import echo, emit, fail, guarded
from infra.config import load


@click.group()
def consumers() -> None:
    """Consumers registered with retention control (list, deregister)."""


@consumers.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per consumer.")
def consumers_list(as_json: bool) -> None:
    """Each registered consumer: reported progress, lag, and whether it holds the floor."""
    import psycopg

    from db.settings import DatabaseSettings
    from producers.retention.report import stream_report

    settings = guarded(lambda: load(DatabaseSettings))
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        report = stream_report(conn)
    listed = 0
    for s in report:
        for c in s.consumers:
            listed += 1
            holds = (
                s.held_by is not None
                and s.held_by.kind == "consumer"
                and (s.held_by.name == c.consumer_id)
            )
            reported = "never" if c.reported_position is None else str(c.reported_position)
            note = f"  holds the floor ({s.held_back} held back)" if holds else ""
            emit(
                as_json,
                {
                    "stream": str(s.stream),
                    "consumer": c.consumer_id,
                    "reported_position": c.reported_position,
                    "committed": s.committed,
                    "lag": c.lag,
                    "holds_floor": holds,
                    "held_back": s.held_back if holds else 0,
                    "registered_at": c.registered_at.isoformat(),
                    "reported_at": c.reported_at.isoformat() if c.reported_at else None,
                },
                f"{s.stream!s:<32} {c.consumer_id:<24} at {reported:>9}  lag {c.lag:>8}{note}",
            )
    if not listed and not as_json:
        echo("no registered consumers")


@consumers.command("deregister")
@click.argument("tenant")
@click.argument("catalog")
@click.argument("epoch", type=int)
@click.argument("consumer")
def consumers_deregister(tenant: str, catalog: str, epoch: int, consumer: str) -> None:
    """Deregister CONSUMER from a stream, so it no longer holds retention back."""
    import psycopg

    from db.settings import DatabaseSettings
    from producers.retention.consumers import deregister
    from producers.retention.exceptions import RetentionError
    from schemas.ids import StreamId

    settings = guarded(lambda: load(DatabaseSettings))
    stream = StreamId(tenant, catalog, epoch)
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        try:
            deregister(conn, stream, consumer)
        except RetentionError as exc:
            fail(exc)
    echo(f"deregistered {consumer!r} from {stream}; the next prune pass may pass its progress")
