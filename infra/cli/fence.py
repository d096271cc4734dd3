"""Fencing a restored catalog's history (``gapless fence-epoch``)."""

from __future__ import annotations

import sys
import uuid

import click

from infra.cli.output import actor, echo, emit, fail, guarded
from infra.config import load


@click.command("fence-epoch")
@click.option("--tenant", help="The tenant whose catalog was restored.")
@click.option("--catalog", help="The restored catalog.")
@click.option(
    "--epoch",
    type=int,
    help="The history epoch to fence (the current one, see `gapless status`); the same"
    " command asked again changes nothing more.",
)
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every catalog of the restored database, each at its current epoch (a run:"
    " its id is printed first; ask again with --run ID, never --all again).",
)
@click.option("--run", "run_id", type=click.UUID, help="Carry on the --all run of this id.")
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
    tenant: str | None,
    catalog: str | None,
    epoch: int | None,
    every: bool,
    run_id: uuid.UUID | None,
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
    completes what is left, and asks for a new rebuild when the last one failed or
    was cancelled. Exit 0 resumed, 1 the rebuild failed or was cancelled (run it
    again to ask for the next) or a process did not acknowledge, 2 bad input, 3
    still paused (the rebuild is not done yet)."""
    from db.exceptions import EpochNotIssued
    from db.settings import DatabaseSettings
    from infra.cli.rebuild import StatusWatch, follow_rebuild
    from infra.control import ControlTopicUnavailable
    from infra.fence import FenceRunNotFound, FenceRunUnfinished, fence_all
    from infra.fence import fence_epoch as run
    from infra.pause import PauseNotAcknowledged
    from processors.settings import AgentSettings
    from schemas.settings import KafkaSettings

    one = tenant is not None and catalog is not None and epoch is not None
    if (every or run_id is not None) == one or ((tenant or catalog or epoch) and not one):
        raise click.UsageError("give --tenant, --catalog and --epoch, or --all (or --run ID)")
    databases = guarded(lambda: load(DatabaseSettings))
    kafka = guarded(lambda: load(KafkaSettings))
    agents = guarded(lambda: load(AgentSettings))
    answers = StatusWatch() if wait else None

    def follow(rebuild_id: uuid.UUID) -> str | None:
        import psycopg

        from db.product import rebuilds

        assert answers is not None
        follow_rebuild(rebuild_id, answers, timeout, as_json)
        with psycopg.connect(databases.product_dsn) as conn:
            row = rebuilds.get(conn, rebuild_id)
        return None if row is None else row.phase

    try:
        if not one:
            every_report = fence_all(
                databases,
                kafka,
                consumer or agents.agents_consumer,
                actor(),
                reason,
                echo,
                follow if wait else None,
                pause_timeout,
                run_id,
            )
            emit(
                as_json,
                every_report.as_dict(),
                f"fence run {every_report.run_id}: {len(every_report.catalogs)} catalog(s)"
                f" {'resumed' if every_report.resumed else 'paused'}",
            )
            phases = {r.rebuild_phase for r in every_report.catalogs}
            sys.exit(1 if phases & {"failed", "cancelled"} else 0 if every_report.resumed else 3)
        assert tenant is not None and catalog is not None and epoch is not None
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
    except (EpochNotIssued, ControlTopicUnavailable, FenceRunNotFound, FenceRunUnfinished) as exc:
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
