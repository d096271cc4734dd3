"""Recovery drills (``gapless drill restore``)."""

from __future__ import annotations

import sys

import click

from infra.cli.output import echo, guarded


@click.group()
def drill() -> None:
    """Recovery procedures carried out end to end in a sandbox, and timed."""


@drill.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object with every figure.")
@click.option(
    "--events",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="About how many events the drill writes across both epochs (60 % before the"
    " backup); from 2,000 on the writers go as fast as they can.",
)
def restore(as_json: bool, events: int) -> None:
    """Restore the resolver database from a pg_dump under load, fence the old epoch,
    rebuild and resume, in a sandbox of its own (databases and topics, dropped after)
    with the deployed processes (two agents workers); prints the timings (pause,
    fence, rebuild, resume, recovery) and the checks, among them that progress is
    reported and pruned again at the new epoch. Exit 1 when a check fails."""
    from infra.drill.restore import run_restore_drill

    sys.exit(guarded(lambda: run_restore_drill(as_json, echo, events)))
