"""Local services: up, down, status, migrate."""

from __future__ import annotations

import json
from typing import Any

import click

from infra.cli.output import echo, guarded
from infra.config import load, use_local_services


@click.command()
def up() -> None:
    """Start local PostgreSQL, Kafka and S3 (idempotent), migrate, create topics."""

    def run() -> None:
        from infra.local.services import up as start
        from infra.provision import provision  # Alembic: only where it migrates

        start(echo)
        use_local_services()
        provision(echo)
        echo("services up")

    guarded(run)


@click.command()
def down() -> None:
    """Stop the local services that `gapless up` started (and only those)."""

    def run() -> None:
        from infra.local.services import down as stop

        stop(echo)

    guarded(run)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--services-only", is_flag=True, help="Only the local services.")
def status(as_json: bool, services_only: bool) -> None:
    """Local services, streams flagged REWOUND (history gone back without a fence, with
    the command that fixes it), streams whose progress report the resolver refused
    (REPORT REFUSED, with what to do next), paused catalogs and who holds each pause,
    then per stream: committed, published, retention floor and what holds it, leases,
    and each consumer's durable progress, lag, parked and quarantined."""
    from dataclasses import asdict

    from db.settings import DatabaseSettings
    from infra.local.services import status as service_status
    from infra.status import (
        collect,
        lines,
        missing_evidence,
        pause_lines,
        paused,
        report_refused,
        report_refused_lines,
        rewound,
        rewound_lines,
        to_json,
    )

    services = guarded(service_status)
    streams: list[Any] = []
    unattributed = 0
    missing: int | None = None
    pauses: list[dict[str, Any]] = []
    flags: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    problem = None
    if not services_only:
        use_local_services()
        try:
            settings = load(DatabaseSettings)
            streams, unattributed = collect(settings)
            missing = missing_evidence(settings)
            pauses = paused(settings)
            flags = rewound(settings)
            refused = report_refused(settings)
        except Exception as exc:  # the databases may be down: say so, keep the rest
            problem = f"streams unavailable: {exc}"
    if as_json:
        click.echo(
            json.dumps(
                {
                    "services": [asdict(s) for s in services],
                    "pauses": pauses,
                    "rewound": flags,
                    "report_refused": refused,
                    "streams": [to_json(s) for s in streams],
                    "undecodable_quarantined": unattributed,
                    "evidence_missing": missing,
                    "error": problem,
                }
            )
        )
        return
    for s in services:
        mark = click.style("up  ", fg="green") if s.running else click.style("down", fg="red")
        click.echo(f"{mark} {s.name:<9} {s.address:<24} {s.detail}")
    if problem:
        echo(problem)
    for flag in flags:
        for line in rewound_lines(flag):
            click.echo(click.style(line, fg="red") if line.startswith("REWOUND") else line)
    for refusal in refused:
        for line in report_refused_lines(refusal):
            click.echo(click.style(line, fg="red") if line.startswith("REPORT") else line)
    for pause in pauses:
        for line in pause_lines(pause):
            click.echo(click.style(line, fg="yellow") if line.startswith("PAUSED") else line)
    for stream in streams:
        for line in lines(stream):
            click.echo(line)
    if unattributed:
        click.echo(f"{unattributed} quarantined messages never decoded (gapless quarantine list)")
    if missing:
        click.echo(
            f"{missing} evidence artifacts referenced but missing from the bucket"
            " (gapless evidence missing)"
        )


@click.command()
@click.option("--local/--no-local", default=True, help="Fill unset variables for local services.")
def migrate(local: bool) -> None:
    """Apply database migrations and create Kafka topics."""

    def run() -> None:
        from infra.provision import provision

        if local:
            use_local_services()
        provision(echo)

    guarded(run)
