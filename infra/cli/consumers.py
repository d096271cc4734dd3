"""Consumers under retention control: list, deregister; standing consumers: standing,
declare, retire."""

from __future__ import annotations

import click

from infra.cli.output import actor, echo, emit, fail, guarded, resolver_conn
from infra.config import load


@click.group()
def consumers() -> None:
    """Consumers under retention control (list, deregister, standing, declare, retire)."""


@consumers.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per consumer.")
def consumers_list(as_json: bool) -> None:
    """Each consumer of each stream: reported progress, lag, whether it holds the floor,
    whether it holds the stream only as a standing consumer, and whether its first
    report was refused because it needs a rebuild."""
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
            if c.standing:
                note += "  (standing)"
            if c.needs_rebuild_since is not None:
                note += (
                    f"  NEEDS REBUILD: reported {c.refused_position},"
                    f" pruned through {s.pruned_through}"
                )
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
                    "standing": c.standing,
                    "needs_rebuild_since": (
                        c.needs_rebuild_since.isoformat() if c.needs_rebuild_since else None
                    ),
                    "refused_position": c.refused_position,
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


@consumers.command("standing")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per standing consumer.")
def consumers_standing(as_json: bool) -> None:
    """The standing consumers: each holds every stream, also streams it has not
    reported on yet."""
    from db.resolver import retention as sql

    with resolver_conn() as conn:
        rows = sql.standing_consumers(conn)
    for row in rows:
        emit(
            as_json,
            {
                "consumer": row.consumer_id,
                "declared_at": row.declared_at.isoformat(),
                "declared_by": row.declared_by,
            },
            f"{row.consumer_id:<24} declared {row.declared_at:%Y-%m-%d %H:%M:%S}"
            f" by {row.declared_by}",
        )
    if not rows and not as_json:
        echo("no standing consumers")


@consumers.command("declare")
@click.argument("consumer")
def consumers_declare(consumer: str) -> None:
    """Make CONSUMER hold every stream from now on, also streams it has never seen
    (what is pruned already stays pruned)."""
    from producers.retention.consumers import declare_standing
    from schemas.ids import CONSUMER_ID

    if not CONSUMER_ID.fullmatch(consumer):
        raise click.BadParameter(f"expected {CONSUMER_ID.pattern}", param_hint="CONSUMER")
    with resolver_conn() as conn:
        new = declare_standing(conn, consumer, actor())
    echo(f"{consumer!r} {'now stands' if new else 'already stood'}: it holds every stream")


@consumers.command("retire")
@click.argument("consumer")
def consumers_retire(consumer: str) -> None:
    """Stop CONSUMER holding the streams it has no registration on (its registrations
    stay until deregistered). Remove it from GAPLESS_RETENTION_CONSUMERS too, or the
    retention service declares it again at its next start."""
    from producers.retention.consumers import retire_standing
    from producers.retention.exceptions import RetentionError

    with resolver_conn() as conn:
        try:
            retire_standing(conn, consumer)
        except RetentionError as exc:
            fail(exc)
    echo(f"retired {consumer!r}; streams it never reported on no longer wait for it")
