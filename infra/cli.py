"""The ``gapless`` command: local services, processes, demo and benchmark."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from infra.config import ConfigurationError, load, use_local_services
from infra.local import ServiceError


def _echo(message: str) -> None:
    click.echo(message, err=True)


def _fail(exc: Exception) -> None:
    click.secho(f"error: {exc}", fg="red", err=True)
    sys.exit(2)


def _guarded(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except (ServiceError, ConfigurationError) as exc:
        _fail(exc)


def _logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format='{"ts":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s",'
        '"msg":"%(message)s"}',
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """gapless: a replay-safe catalog event pipeline on PostgreSQL and Kafka.

    Configuration comes from GAPLESS_* environment variables (see the README);
    commands that manage local services fill in the local ones themselves.
    """


@main.command()
def up() -> None:
    """Start local PostgreSQL, Kafka and S3 (idempotent), migrate, create topics."""

    def run() -> None:
        from infra.local import up as start

        start(_echo)
        use_local_services()
        _prepare()
        _echo("services up")

    _guarded(run)


def _prepare() -> None:
    from db.migrate import upgrade_all
    from db.settings import DatabaseSettings
    from infra.topics import ensure_topics
    from schemas.topics import KafkaSettings

    upgrade_all(load(DatabaseSettings), _echo)
    ensure_topics(load(KafkaSettings), _echo)


@main.command()
def down() -> None:
    """Stop the local services that `gapless up` started (and only those)."""

    def run() -> None:
        from infra.local import down as stop

        stop(_echo)

    _guarded(run)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--services-only", is_flag=True, help="Only the local services.")
def status(as_json: bool, services_only: bool) -> None:
    """Local services, then per stream: committed, published, retention floor and what
    holds it, leases, and each consumer's durable progress, lag, parked and quarantined."""
    from dataclasses import asdict

    from db.settings import DatabaseSettings
    from infra.local import status as service_status
    from infra.status import collect, lines, to_json

    services = _guarded(service_status)
    streams: list[Any] = []
    unattributed = 0
    problem = None
    if not services_only:
        use_local_services()
        try:
            streams, unattributed = collect(load(DatabaseSettings))
        except Exception as exc:  # the databases may be down: say so, keep the rest
            problem = f"streams unavailable: {exc}"
    if as_json:
        click.echo(
            json.dumps(
                {
                    "services": [asdict(s) for s in services],
                    "streams": [to_json(s) for s in streams],
                    "undecodable_quarantined": unattributed,
                    "error": problem,
                }
            )
        )
        return
    for s in services:
        mark = click.style("up  ", fg="green") if s.running else click.style("down", fg="red")
        click.echo(f"{mark} {s.name:<9} {s.address:<24} {s.detail}")
    if problem:
        _echo(problem)
    for stream in streams:
        for line in lines(stream):
            click.echo(line)
    if unattributed:
        click.echo(f"{unattributed} quarantined messages never decoded (gapless quarantine list)")


@main.command()
@click.option("--local/--no-local", default=True, help="Fill unset variables for local services.")
def migrate(local: bool) -> None:
    """Apply database migrations and create Kafka topics."""

    def run() -> None:
        if local:
            use_local_services()
        _prepare()

    _guarded(run)


@main.command()
def relay() -> None:
    """Run the outbox relay until SIGTERM (a deployable process)."""
    from producers.relay.service import run as run_relay
    from producers.relay.settings import RelaySettings

    _logging()
    settings = _guarded(lambda: load(RelaySettings))
    run_relay(settings)


@main.command("resolver-api")
def resolver_api() -> None:
    """Run the resolver HTTP API on 127.0.0.1 until SIGTERM (a deployable process)."""
    import uvicorn

    from producers.api import create_app
    from producers.settings import ApiSettings

    _logging()
    settings = _guarded(lambda: load(ApiSettings))
    uvicorn.run(
        create_app(settings), host="127.0.0.1", port=settings.resolver_api_port, log_config=None
    )


@main.command()
@click.option("--once", is_flag=True, help="One pass over every stream, then exit.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per stream pruned.")
def prune(once: bool, as_json: bool) -> None:
    """Delete retained events nobody needs any more, and print what went per stream.

    Only published events older than GAPLESS_RETENTION_AGE_SECONDS, and never past a
    registered consumer's progress or a live lease's pin. Without --once, a pass
    runs every GAPLESS_PRUNE_INTERVAL_SECONDS until SIGTERM.
    """
    from producers.retention.pruner import StreamPruned
    from producers.retention.service import prune_once, run
    from producers.retention.settings import RetentionSettings

    settings = _guarded(lambda: load(RetentionSettings))

    def show(results: list[StreamPruned], quiet: bool) -> None:
        for r in results:
            if quiet and not r.deleted:
                continue
            if as_json:
                click.echo(
                    json.dumps(
                        {
                            "stream": str(r.stream),
                            "deleted": r.deleted,
                            "pruned_through": r.pruned_through,
                            "limited_by": r.limited_by,
                        }
                    )
                )
            else:
                click.echo(
                    f"{r.stream!s:<32} deleted {r.deleted:>8}  pruned through"
                    f" {r.pruned_through:>9}  limited by {r.limited_by}"
                )

    if once:
        results = prune_once(settings)
        show(results, quiet=False)
        if not results:
            _echo("no stream has published events left to prune")
        return
    _logging()
    run(settings, lambda results: show(results, quiet=True))


@main.group()
def consumers() -> None:
    """Consumers registered with retention control (list, deregister)."""


@consumers.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per consumer.")
def consumers_list(as_json: bool) -> None:
    """Each registered consumer: reported progress, lag, and whether it holds the floor."""
    import psycopg

    from db.settings import DatabaseSettings
    from producers.retention.report import stream_report

    settings = _guarded(lambda: load(DatabaseSettings))
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
            if as_json:
                click.echo(
                    json.dumps(
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
                        }
                    )
                )
            else:
                reported = "never" if c.reported_position is None else str(c.reported_position)
                note = f"  holds the floor ({s.held_back} held back)" if holds else ""
                click.echo(
                    f"{s.stream!s:<32} {c.consumer_id:<24} at {reported:>9}  lag {c.lag:>8}{note}"
                )
    if not listed and not as_json:
        _echo("no registered consumers")


@consumers.command("deregister")
@click.argument("tenant")
@click.argument("catalog")
@click.argument("epoch", type=int)
@click.argument("consumer")
def consumers_deregister(tenant: str, catalog: str, epoch: int, consumer: str) -> None:
    """Deregister CONSUMER from a stream, so it no longer holds retention back."""
    import psycopg

    from db.settings import DatabaseSettings
    from db.stream_writer import StreamId
    from producers.retention.consumers import deregister
    from producers.retention.exceptions import RetentionError

    settings = _guarded(lambda: load(DatabaseSettings))
    stream = StreamId(tenant, catalog, epoch)
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        try:
            deregister(conn, stream, consumer)
        except RetentionError as exc:
            _fail(exc)
    _echo(f"deregistered {consumer!r} from {stream}; the next prune pass may pass its progress")


@main.command()
def agents() -> None:
    """Run the product agents (a Faust worker) until SIGTERM (a deployable process)."""
    import faust

    from processors.app import create_app
    from processors.settings import AgentSettings

    settings = _guarded(lambda: load(AgentSettings))
    app = create_app(settings)
    worker = faust.Worker(app, loglevel="INFO")
    worker.execute_from_commandline()


@main.command()
@click.option("--events", default=20_000, show_default=True, help="Accepted changes to write.")
@click.option("--tenants", default=3, show_default=True, help="Tenants (each with 2 catalogs).")
@click.option("--writers", default=8, show_default=True, help="Concurrent writer threads.")
@click.option("--keep-running", is_flag=True, help="Leave services running afterwards.")
@click.option(
    "--chaos/--no-chaos", default=True, show_default=True, help="Kill -9 relay and agents once."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def demo(
    events: int, tenants: int, writers: int, keep_running: bool, chaos: bool, as_json: bool
) -> None:
    """Run the whole pipeline on a realistic workload and check the projection."""
    from infra.demo import run_demo

    ok = _guarded(lambda: run_demo(events, tenants, writers, keep_running, as_json, _echo, chaos))
    sys.exit(0 if ok else 1)


@main.group()
def quarantine() -> None:
    """Inspect and repair quarantined messages (list, retry, skip)."""


def _actor() -> str:
    import getpass

    return os.environ.get("GAPLESS_OPERATOR") or getpass.getuser()


@quarantine.command("list")
@click.option(
    "--status",
    type=click.Choice(["open", "retried", "skipped", "all"]),
    default="open",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry.")
def quarantine_list(status: str, as_json: bool) -> None:
    """List quarantined messages with their origin and classified error."""
    import psycopg

    from processors.applier.repair import list_entries
    from processors.settings import AgentSettings

    settings = _guarded(lambda: load(AgentSettings))
    with psycopg.connect(settings.product_dsn) as conn:
        entries = list_entries(conn, None if status == "all" else status)
    for e in entries:
        stream = "/".join(map(str, e.stream)) if e.stream else "-"
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "id": e.id,
                        "consumer": e.consumer,
                        "topic": e.topic,
                        "partition": e.partition,
                        "offset": e.offset,
                        "event_id": str(e.event_id) if e.event_id else None,
                        "stream": stream if e.stream else None,
                        "position": e.position,
                        "error_code": e.error_code,
                        "error_detail": e.error_detail,
                        "status": e.status,
                        "created_at": e.created_at.isoformat(),
                        "resolution": e.resolution,
                    }
                )
            )
        else:
            click.echo(
                f"#{e.id:<5} {e.status:<8} {e.error_code:<22} {stream}#{e.position or '-'}"
                f"  ({e.topic} p{e.partition} o{e.offset})  {e.error_detail[:80]}"
            )
    if not entries and not as_json:
        _echo(f"no {status} entries")


@quarantine.command("retry")
@click.argument("entry_ids", nargs=-1, type=int, required=True)
def quarantine_retry(entry_ids: tuple[int, ...]) -> None:
    """Apply quarantined messages again (after fixing what made them fail)."""
    from db.epochs import EpochSource
    from processors.applier.batch import Applier
    from processors.applier.repair import RepairError, retry
    from processors.settings import AgentSettings
    from schemas.codec import CODEC

    settings = _guarded(lambda: load(AgentSettings))
    applier = Applier(
        settings.product_dsn, EpochSource(settings.control_dsn), CODEC, settings.agents_consumer
    )
    failed = 0
    for entry_id in entry_ids:
        try:
            ok = retry(settings.product_dsn, applier, entry_id, _actor())
        except RepairError as exc:
            _echo(f"#{entry_id}: {exc.code}: {exc}")
            failed += 1
            continue
        _echo(f"#{entry_id}: {'applied, marked retried' if ok else 'still failing, left open'}")
        failed += 0 if ok else 1
    applier.close()
    sys.exit(1 if failed else 0)


@quarantine.command("skip")
@click.argument("entry_id", type=int)
@click.option("--reason", required=True, help="Why it is safe to give this event up (audited).")
def quarantine_skip(entry_id: int, reason: str) -> None:
    """Give up a quarantined event with an audited reason, so progress can pass it."""
    from processors.applier.repair import RepairError, skip
    from processors.settings import AgentSettings

    settings = _guarded(lambda: load(AgentSettings))
    try:
        position = skip(settings.product_dsn, entry_id, reason, _actor())
    except RepairError as exc:
        _fail(exc)
    _echo(
        f"#{entry_id}: skipped"
        + (f"; stream progress now {position}" if position is not None else "")
    )


@main.command()
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
    from schemas.topics import KafkaSettings

    settings = _guarded(lambda: load(KafkaSettings))

    def undecodable(partition: int, offset: int, exc: CodecError) -> None:
        _echo(f"p{partition} o{offset}: cannot decode ({exc})")

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


@main.group()
def collectors() -> None:
    """Collector credentials: register, rotate, revoke, list (operator commands)."""


def _resolver_conn() -> Any:
    import psycopg

    from db.settings import DatabaseSettings

    settings = _guarded(lambda: load(DatabaseSettings))
    return psycopg.connect(settings.resolver_dsn, autocommit=True)


def _credential_line(row: Any) -> str:
    state = f"revoked {row.revoked_at.isoformat()}" if row.revoked_at else "active"
    return f"{row.client_id:<32} {row.tenant_id}/{row.source}/{row.instance_id}  {state}"


@collectors.command("register")
@click.option("--tenant", required=True)
@click.option("--source", required=True, help="The source the collector captures, e.g. shop-x.")
@click.option("--instance-id", required=True, help="The stable collector instance.")
@click.option("--client-id", required=True, help="The credential's client id (JWT sub).")
def collectors_register(tenant: str, source: str, instance_id: str, client_id: str) -> None:
    """Map CLIENT-ID to a collector instance (created if new; idempotent)."""
    from producers.intake.collectors import register
    from producers.intake.exceptions import CollectorRegistryError

    with _resolver_conn() as conn:
        try:
            row = register(conn, client_id, tenant, source, instance_id)
        except CollectorRegistryError as exc:
            _fail(exc)
    click.echo(_credential_line(row))


@collectors.command("rotate")
@click.option("--client-id", required=True, help="The credential being replaced.")
@click.option("--new-client-id", required=True, help="The new credential's client id.")
@click.option(
    "--revoke-old/--keep-old",
    default=False,
    show_default=True,
    help="Revoke the old credential at once (default: keep it until revoked).",
)
def collectors_rotate(client_id: str, new_client_id: str, revoke_old: bool) -> None:
    """Give the instance of CLIENT-ID a new credential; its receipts stay readable."""
    from producers.intake.collectors import rotate
    from producers.intake.exceptions import CollectorRegistryError

    with _resolver_conn() as conn:
        try:
            row = rotate(conn, client_id, new_client_id, revoke_old)
        except CollectorRegistryError as exc:
            _fail(exc)
    click.echo(_credential_line(row))


@collectors.command("revoke")
@click.option("--client-id", required=True)
def collectors_revoke(client_id: str) -> None:
    """Refuse CLIENT-ID's tokens from now on (idempotent)."""
    from producers.intake.collectors import revoke
    from producers.intake.exceptions import CollectorRegistryError

    with _resolver_conn() as conn:
        try:
            row = revoke(conn, client_id)
        except CollectorRegistryError as exc:
            _fail(exc)
    click.echo(_credential_line(row))


@collectors.command("list")
@click.option("--tenant", help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per credential.")
def collectors_list(tenant: str | None, as_json: bool) -> None:
    """Every credential with its instance and state, in client-id order."""
    from db.intake import list_credentials

    listed = 0
    after = ""
    with _resolver_conn() as conn:
        while page := list_credentials(conn, tenant, after, limit=500):
            for row in page:
                listed += 1
                if as_json:
                    click.echo(
                        json.dumps(
                            {
                                "client_id": row.client_id,
                                "tenant": row.tenant_id,
                                "source": row.source,
                                "instance_id": row.instance_id,
                                "created_at": row.created_at.isoformat(),
                                "revoked_at": row.revoked_at.isoformat()
                                if row.revoked_at
                                else None,
                            }
                        )
                    )
                else:
                    click.echo(_credential_line(row))
            after = page[-1].client_id
    if not listed and not as_json:
        _echo("no collector credentials")


@main.command("collector-token")
@click.option("--client-id", required=True, help="A registered credential's client id.")
@click.option("--tenant", help="Also claim this tenant (checked against the registry).")
@click.option("--ttl", default=3600, show_default=True, help="Seconds until it expires.")
def collector_token(client_id: str, tenant: str | None, ttl: int) -> None:
    """Print a collector token signed with the local dev key (local runs only)."""
    from infra.local import collector_keys
    from infra.local.layout import current_layout

    token = _guarded(lambda: collector_keys.mint(current_layout(), client_id, tenant, ttl))
    click.echo(token)


@main.command("sweep-jobs")
@click.option("--once", is_flag=True, help="One pass, print what it did, then exit.")
def sweep_jobs(once: bool) -> None:
    """Re-enqueue intake jobs left pending (the API's enqueue failed or never ran).

    Jobs are due GAPLESS_JOB_SWEEP_AFTER_SECONDS after they were recorded, then again
    after each failed attempt with exponential backoff and jitter. Without --once, a
    pass runs every GAPLESS_SWEEP_INTERVAL_SECONDS until SIGTERM.
    """
    from producers.intake.settings import SweeperSettings
    from producers.intake.sweeper import run

    settings = _guarded(lambda: load(SweeperSettings))
    if not once:
        _logging()
    result = run(settings, once)
    if result is not None:
        click.echo(
            json.dumps(
                {
                    "pages": result.pages,
                    "claimed": result.claimed,
                    "enqueued": result.enqueued,
                    "still_pending": {str(k): v for k, v in result.failed.items()},
                }
            )
        )


@main.command("resolver-worker")
def resolver_worker() -> None:
    """Run the capture worker until SIGTERM (a deployable process).

    Takes capture jobs from GAPLESS_JOBS_TOPIC (and, every
    GAPLESS_WORKER_SCAN_INTERVAL_SECONDS, due retries, expired leases and jobs whose
    message never came from the database), parses each capture with its source's
    adapter and resolves every product into a decision or a review case.
    /healthz and /metrics with GAPLESS_WORKER_HTTP_PORT.
    """
    from producers.worker.service import run
    from producers.worker.settings import WorkerSettings

    _logging()
    settings = _guarded(lambda: load(WorkerSettings))
    run(settings)


@main.group()
def sources() -> None:
    """Source bindings: which catalog and adapter a source's captures go to."""


@sources.command("register")
@click.option("--tenant", required=True)
@click.option("--source", required=True, help="The source, as its collectors are registered.")
@click.option("--catalog", required=True, help="The catalog its products resolve into.")
@click.option("--adapter", required=True, help="The source adapter that parses its captures.")
def sources_register(tenant: str, source: str, catalog: str, adapter: str) -> None:
    """Bind a source to a catalog and an adapter (idempotent; a source is bound once)."""
    from db.unit_of_work import Transaction
    from producers.worker.adapters import ADAPTERS
    from producers.worker.sources import BindingRefused, register

    with _resolver_conn() as conn, conn.transaction():
        try:
            row = register(Transaction(conn), tenant, source, catalog, adapter, _actor(), ADAPTERS)
        except BindingRefused as exc:
            _fail(exc)
    click.echo(f"{row.tenant_id}/{row.source} -> catalog {row.catalog_id}, adapter {row.adapter}")


@sources.command("list")
@click.option("--tenant", help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per binding.")
def sources_list(tenant: str | None, as_json: bool) -> None:
    """Every source binding, in (tenant, source) order."""
    from db.repositories.source_bindings import page
    from db.unit_of_work import Transaction

    listed = 0
    after = ("", "")
    with _resolver_conn() as conn:
        while rows := page(Transaction(conn), tenant, after, 500):
            for row in rows:
                listed += 1
                if as_json:
                    click.echo(
                        json.dumps(
                            {
                                "tenant": row.tenant_id,
                                "source": row.source,
                                "catalog": row.catalog_id,
                                "adapter": row.adapter,
                                "registered_by": row.registered_by,
                                "created_at": row.created_at.isoformat(),
                            }
                        )
                    )
                else:
                    click.echo(
                        f"{row.tenant_id}/{row.source:<24} catalog {row.catalog_id:<16}"
                        f" adapter {row.adapter}"
                    )
            after = (rows[-1].tenant_id, rows[-1].source)
    if not listed and not as_json:
        _echo("no source bindings")


@main.group()
def captures() -> None:
    """Capture work waiting on an operator: failures, retry, skip; and replays."""


@captures.command("failures")
@click.option("--tenant", help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per failure.")
def captures_failures(tenant: str | None, as_json: bool) -> None:
    """Failed jobs, then products waiting on a retry or an operator, with their codes."""
    from producers.worker.repair import open_failures

    listed = 0
    with _resolver_conn() as conn:
        for f in open_failures(conn, tenant):
            listed += 1
            if as_json:
                click.echo(
                    json.dumps(
                        {
                            "kind": f.kind,
                            "id": f.handle,
                            "tenant": f.tenant_id,
                            "job_id": str(f.job_id),
                            "capture_id": str(f.capture_id),
                            "source_item_id": f.source_item_id,
                            "status": f.status,
                            "attempts": f.attempts,
                            "error_code": f.error_code,
                            "error": f.error,
                            "next_attempt_at": f.next_attempt_at.isoformat()
                            if f.next_attempt_at
                            else None,
                        }
                    )
                )
            else:
                what = (
                    f"item #{f.handle} {f.source_item_id}"
                    if f.kind == "item"
                    else f"job {f.handle}"
                )
                click.echo(
                    f"{what:<48} {f.status:<9} {f.error_code or '-':<22} attempts {f.attempts}"
                    f"  {(f.error or '')[:80]}"
                )
    if not listed and not as_json:
        _echo("no open capture failures")


@captures.command("replay")
@click.option("--tenant", required=True)
@click.argument("capture_ids", nargs=-1, required=True)
@click.option("--reason", default="", help="Why (audited), e.g. the parser change.")
def captures_replay(tenant: str, capture_ids: tuple[str, ...], reason: str) -> None:
    """Process stored captures again with their source's current parser version.

    Each replay is a job of its own, named by the capture and the parser version (a
    second request is the same job); `gapless sweep-jobs` enqueues it.
    """
    import uuid

    from producers.worker.outcomes import SourceNotBound
    from producers.worker.repair import RepairError
    from producers.worker.replays import request_replay

    failed = 0
    with _resolver_conn() as conn:
        for raw in capture_ids:
            try:
                replay = request_replay(conn, tenant, uuid.UUID(raw), _actor(), reason)
            except (ValueError, RepairError, SourceNotBound) as exc:
                _echo(f"{raw}: {getattr(exc, 'code', 'INVALID')}: {exc}")
                failed += 1
                continue
            state = "requested" if replay.created else "already requested"
            click.echo(f"capture {raw}: {replay.kind} job {replay.job_id} {state}")
    sys.exit(1 if failed else 0)


def _repair_target(target: str) -> Any:
    """An item's numeric id, or a job's UUID."""
    import uuid

    if target.isdigit():
        return int(target)
    try:
        return uuid.UUID(target)
    except ValueError:
        _fail(ValueError(f"{target!r} is neither a product id (a number) nor a job id (a UUID)"))


@captures.command("retry")
@click.argument("targets", nargs=-1, required=True)
@click.option("--reason", default="", help="What was fixed (audited).")
def captures_retry(targets: tuple[str, ...], reason: str) -> None:
    """Retry failed products (by id) or failed jobs (by job id) now, with fresh budgets."""
    from producers.worker.repair import RepairError, retry_item, retry_job

    failed = 0
    with _resolver_conn() as conn:
        for target in targets:
            handle = _repair_target(target)
            try:
                if isinstance(handle, int):
                    retry_item(conn, handle, _actor(), reason)
                    _echo(f"item #{handle}: due now")
                else:
                    count = retry_job(conn, handle, _actor(), reason)
                    _echo(f"job {handle}: due now, {count} failed product(s) re-queued")
            except RepairError as exc:
                _echo(f"{target}: {exc.code}: {exc.message}")
                failed += 1
    sys.exit(1 if failed else 0)


@captures.command("skip")
@click.argument("target")
@click.option("--reason", required=True, help="Why it is safe to give this up (audited).")
def captures_skip(target: str, reason: str) -> None:
    """Give a failed product (by id) or a failed job (by job id) up, with a reason."""
    from producers.worker.repair import RepairError, skip_item, skip_job

    handle = _repair_target(target)
    with _resolver_conn() as conn:
        try:
            if isinstance(handle, int):
                status = skip_item(conn, handle, _actor(), reason)
                _echo(f"item #{handle}: skipped; its job is {status}")
            else:
                skip_job(conn, handle, _actor(), reason)
                _echo(f"job {handle}: skipped")
        except RepairError as exc:
            _fail(exc)


@main.command()
@click.option("--seconds", default=5.0, show_default=True, help="Duration of each phase.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench(seconds: float, as_json: bool) -> None:
    """Measure writer, relay, applier and end-to-end figures against baselines."""
    from infra.bench.run import run_bench

    _guarded(lambda: run_bench(seconds, as_json, _echo))


if __name__ == "__main__":
    main()
