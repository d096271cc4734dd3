"""Fencing a restored catalog's history (``gapless fence-epoch``)."""

from __future__ import annotations

import sys
import uuid

import click

from infra.cli.output import actor, echo, emit, fail, guarded
from infra.config import load


@click.command("fence-epoch")
@click.option("--tenant", required=True, help="The tenant whose catalog was restored.")
@click.option("--catalog", required=True, help="The restored catalog.")
@click.option(
    "--epoch",
    type=int,
    required=True,
    help="The history epoch to fence (the current one, see `gapless status`); the same"
    " command asked again changes nothing more.",
)
@click.option("--reason", required=True, help="Why (audited with your name).")
@click.option(
    "--consumer", help="Whose projections (default: the agents' GAPLESS_AGENTS_CONSUMER)."
)
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the rebuild at the new epoch to its end, then resume the catalog"
    " (without it, run the command again once the rebuild is done).",
)
@click.option(
    "--pause-timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds to wait for every live process to acknowledge the pause (and the resume).",
)
@click.option(
    "--timeout",
    type=float,
    default=3600.0,
    show_default=True,
    help="Seconds to follow the rebuild.",
)
@click.option("--json", "as_json", is_flag=True, help="The outcome as one JSON object.")
def fence_epoch(
    tenant: str,
    catalog: str,
    epoch: int,
    reason: str,
    consumer: str | None,
    wait: bool,
    pause_timeout: float,
    timeout: float,
    as_json: bool,
) -> None:
    """After a restore of the resolver database: pause the catalog (every process
    acknowledges), issue the next epoch, fence the old history (no more writes or
    publishing), settle what the agents hold of it, rebuild the catalog's projections
    at the new epoch and, once the rebuild is done, resume. Safe to run again: it
    completes what is left. Exit 0 resumed, 1 the rebuild failed or a process did
    not acknowledge, 2 bad input, 3 still paused (the rebuild is not done yet)."""
    from db.exceptions import EpochNotIssued
    from db.settings import DatabaseSettings
    from infra.cli.rebuild import StatusWatch, follow_rebuild
    from infra.control import ControlTopicUnavailable
    from infra.fence import fence_epoch as run
    from infra.pause import PauseNotAcknowledged
    from processors.settings import AgentSettings
    from schemas.settings import KafkaSettings

    databases = guarded(lambda: load(DatabaseSettings))
    kafka = guarded(lambda: load(KafkaSettings))
    agents = guarded(lambda: load(AgentSettings))
    answers = StatusWatch() if wait else None

    def follow(rebuild_id: uuid.UUID) -> str | None:
        import psycopg

        from db import rebuilds

        assert answers is not None
        follow_rebuild(rebuild_id, answers, timeout, as_json)
        with psycopg.connect(databases.product_dsn) as conn:
            row = rebuilds.get(conn, rebuild_id)
        return None if row is None else row.phase

    try:
        report = run(
            databases,
            kafka,
            consumer or agents.agents_consumer,
            tenant,
            catalog,
            epoch,
            actor(),
            reason,
            echo,
            follow if wait else None,
            pause_timeout,
        )
    except (EpochNotIssued, ControlTopicUnavailable) as exc:
        fail(exc)
    except PauseNotAcknowledged as exc:
        click.secho(f"error: {exc.code}: {exc}", fg="red", err=True)
        sys.exit(1)
    state = "resumed" if report.resumed else "paused"
    emit(
        as_json,
        report.as_dict(),
        f"epoch {report.epoch}: rebuild {report.rebuild_id} {report.rebuild_phase}; {state}",
    )
    if report.resumed is None and report.paused is not None and report.paused.state == "resumed":
        return  # the procedure was complete before
    if report.rebuild_phase in ("failed", "cancelled"):
        sys.exit(1)
    if report.resumed is None:
        sys.exit(3)
