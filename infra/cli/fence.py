"""Fencing a restored catalog's history (``gapless fence-epoch``)."""

from __future__ import annotations

import sys

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
@click.option("--wait", is_flag=True, help="Follow the rebuild at the new epoch to its end.")
@click.option("--json", "as_json", is_flag=True, help="The outcome as one JSON object.")
def fence_epoch(
    tenant: str,
    catalog: str,
    epoch: int,
    reason: str,
    consumer: str | None,
    wait: bool,
    as_json: bool,
) -> None:
    """After a restore of the resolver database: issue the next epoch, fence the old
    history (no more writes or publishing), settle what the agents hold of it, and
    rebuild the catalog's projections at the new epoch. Safe to run again."""
    from db.exceptions import EpochNotIssued
    from db.settings import DatabaseSettings
    from infra.cli.rebuild import StatusWatch, follow_rebuild
    from infra.control import ControlTopicUnavailable
    from infra.fence import fence_epoch as run
    from processors.settings import AgentSettings
    from schemas.settings import KafkaSettings

    databases = guarded(lambda: load(DatabaseSettings))
    kafka = guarded(lambda: load(KafkaSettings))
    agents = guarded(lambda: load(AgentSettings))
    answers = StatusWatch() if wait else None
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
        )
    except (EpochNotIssued, ControlTopicUnavailable) as exc:
        fail(exc)
    emit(as_json, report.as_dict(), f"epoch {report.epoch}: rebuild {report.rebuild_id}")
    if answers is not None and report.rebuild_id is not None:
        sys.exit(follow_rebuild(report.rebuild_id, answers, 3600.0, as_json))
