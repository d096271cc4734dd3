"""Fencing a restored catalog's history (``gapless fence-epoch``)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import click

from infra.cli.output import actor, echo, emit, fail, guarded
from infra.config import load

if TYPE_CHECKING:
    from db.settings import DatabaseSettings
    from infra.fence import FenceReport
    from schemas.settings import KafkaSettings

Follow = Callable[[uuid.UUID], str | None]
"""Follows a rebuild to its end and returns its last phase (``--wait``)."""


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
    from infra.control import ControlTopicUnavailable
    from infra.fence import FenceRunNotFound, FenceRunUnfinished
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
    follow = _follower(databases.product_dsn, timeout, as_json) if wait else None
    try:
        if not one:
            _fence_all(
                databases,
                kafka,
                consumer or agents.agents_consumer,
                reason,
                follow,
                pause_timeout,
                run_id,
                as_json,
            )
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
            follow,
            pause_timeout,
        )
    except (EpochNotIssued, ControlTopicUnavailable, FenceRunNotFound, FenceRunUnfinished) as exc:
        fail(exc)
    except PauseNotAcknowledged as exc:
        click.secho(f"error: {exc.code}: {exc}", fg="red", err=True)
        sys.exit(1)
    _outcome(report, as_json)


def _outcome(report: FenceReport, as_json: bool) -> None:
    """One catalog's outcome; exits 1 when the rebuild failed or was cancelled, 3 when
    the catalog stays paused, and returns when it is resumed (now or before)."""
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


def _follower(product_dsn: str, timeout: float, as_json: bool) -> Follow:
    """``--wait``: follow a rebuild to its end as ``gapless rebuild status --wait`` does
    (listening on the status topic from now on), then read its last phase."""
    from infra.cli.rebuild import StatusWatch, follow_rebuild

    answers = StatusWatch()

    def follow(rebuild_id: uuid.UUID) -> str | None:
        import psycopg

        from db.product import rebuilds

        follow_rebuild(rebuild_id, answers, timeout, as_json)
        with psycopg.connect(product_dsn) as conn:
            row = rebuilds.get(conn, rebuild_id)
        return None if row is None else row.phase

    return follow


def _fence_all(
    databases: DatabaseSettings,
    kafka: KafkaSettings,
    consumer: str,
    reason: str,
    follow: Follow | None,
    pause_timeout: float,
    run_id: uuid.UUID | None,
    as_json: bool,
) -> NoReturn:
    """``--all`` (or ``--run``): the procedure for every catalog; exits 1 when a
    rebuild failed or was cancelled, else 0 when every catalog is resumed, else 3."""
    from infra.fence import fence_all

    every_report = fence_all(
        databases,
        kafka,
        consumer,
        actor(),
        reason,
        echo,
        follow,
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
