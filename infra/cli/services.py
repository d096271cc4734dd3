"""Local services: up, down, status, migrate."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import click

from infra.cli.output import echo, guarded
from infra.config import load, use_local_services

if TYPE_CHECKING:
    from infra.local.status import ServiceStatus
    from infra.status import StreamStatus


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


@dataclass
class _Databases:
    """What ``status`` reads of the local databases; ``problem`` says why the rest is
    missing when they could not be read (they may be down)."""

    streams: list[StreamStatus] = field(default_factory=list)
    unattributed: int = 0
    missing: int | None = None
    pauses: list[dict[str, Any]] = field(default_factory=list)
    flags: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    problem: str | None = None


def _read_databases() -> _Databases:
    """Streams, missing evidence, pauses, REWOUND flags and refused reports, in that
    order; what was read before an error is kept, and the error is the ``problem``."""
    from db.settings import DatabaseSettings
    from infra.status import collect, missing_evidence, paused, report_refused, rewound

    found = _Databases()
    use_local_services()
    try:
        settings = load(DatabaseSettings)
        found.streams, found.unattributed = collect(settings)
        found.missing = missing_evidence(settings)
        found.pauses = paused(settings)
        found.flags = rewound(settings)
        found.refused = report_refused(settings)
    except Exception as exc:  # the databases may be down: say so, keep the rest
        found.problem = f"streams unavailable: {exc}"
    return found


def _echo_lines(services: list[ServiceStatus], found: _Databases) -> None:
    """The status for people: services, then the flags, refusals and pauses in colour,
    then each stream's lines and the counts of what has no stream."""
    from infra.status import lines, pause_lines, report_refused_lines, rewound_lines

    for s in services:
        mark = click.style("up  ", fg="green") if s.running else click.style("down", fg="red")
        click.echo(f"{mark} {s.name:<9} {s.address:<24} {s.detail}")
    if found.problem:
        echo(found.problem)
    for flag in found.flags:
        for line in rewound_lines(flag):
            click.echo(click.style(line, fg="red") if line.startswith("REWOUND") else line)
    for refusal in found.refused:
        for line in report_refused_lines(refusal):
            click.echo(click.style(line, fg="red") if line.startswith("REPORT") else line)
    for pause in found.pauses:
        for line in pause_lines(pause):
            click.echo(click.style(line, fg="yellow") if line.startswith("PAUSED") else line)
    for stream in found.streams:
        for line in lines(stream):
            click.echo(line)
    if found.unattributed:
        click.echo(
            f"{found.unattributed} quarantined messages never decoded (gapless quarantine list)"
        )
    if found.missing:
        click.echo(
            f"{found.missing} evidence artifacts referenced but missing from the bucket"
            " (gapless evidence missing)"
        )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--services-only", is_flag=True, help="Only the local services.")
def status(as_json: bool, services_only: bool) -> None:
    """Local services, streams flagged REWOUND (history gone back without a fence, with
    the command that fixes it), streams whose progress report the resolver refused
    (REPORT REFUSED, with what to do next), paused catalogs and who holds each pause,
    then per stream: committed, published, retention floor and what holds it, leases,
    and each consumer's durable progress, lag, parked and quarantined."""
    from infra.local.services import status as service_status
    from infra.status import to_json

    services = guarded(service_status)
    found = _Databases() if services_only else _read_databases()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "services": [asdict(s) for s in services],
                    "pauses": found.pauses,
                    "rewound": found.flags,
                    "report_refused": found.refused,
                    "streams": [to_json(s) for s in found.streams],
                    "undecodable_quarantined": found.unattributed,
                    "evidence_missing": found.missing,
                    "error": found.problem,
                }
            )
        )
        return
    _echo_lines(services, found)


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
