"""The deployable processes (relay, resolver API, agents, read API, capture worker,
console) and the periodic jobs (prune, sweep-jobs), each run until SIGTERM or once."""

from __future__ import annotations

import json

import click

from infra.cli.output import echo, emit, guarded, process_logging
from infra.config import load


@click.command()
def relay() -> None:
    """Run the outbox relay until SIGTERM (a deployable process; /healthz, /readyz and
    /metrics with GAPLESS_RELAY_HTTP_PORT)."""
    from producers.relay.service import run as run_relay
    from producers.relay.settings import RelaySettings

    process_logging("relay")
    settings = guarded(lambda: load(RelaySettings))
    run_relay(settings)


@click.command("resolver-api")
def resolver_api() -> None:
    """Run the resolver HTTP API until SIGTERM (a deployable process), on
    GAPLESS_RESOLVER_API_HOST:GAPLESS_RESOLVER_API_PORT; /healthz, /readyz, /metrics."""
    import uvicorn

    from producers.api import create_app
    from producers.exports.settings import ExportSettings
    from producers.settings import ApiSettings

    process_logging("resolver-api")
    settings = guarded(lambda: load(ApiSettings))
    exports = guarded(lambda: load(ExportSettings))
    uvicorn.run(
        create_app(settings, exports),
        host=settings.resolver_api_host,
        port=settings.resolver_api_port,
        log_config=None,
    )


@click.command("read-api")
def read_api() -> None:
    """Run the product read API until SIGTERM (a deployable process).

    Serves items with their listing mappings, attribute values and splits,
    shipping-policy versions and a full-text search, each read from the catalog's
    serving generation, on GAPLESS_READ_API_HOST:GAPLESS_READ_API_PORT; /healthz,
    /readyz, /metrics and the OpenAPI document at /docs.
    """
    import uvicorn

    from processors.serving.app import create_app
    from processors.settings import ReadApiSettings

    process_logging("read-api")
    settings = guarded(lambda: load(ReadApiSettings))
    uvicorn.run(
        create_app(settings),
        host=settings.read_api_host,
        port=settings.read_api_port,
        log_config=None,
    )


@click.command()
def console() -> None:
    """Run the operations console until SIGTERM (a deployable process).

    Server-rendered pages for operators, on GAPLESS_CONSOLE_HOST:GAPLESS_CONSOLE_PORT:
    streams and their lag, rebuilds, pauses and fences, quarantine, parked events,
    capture failures and the audit of every action. Log in with a token of
    GAPLESS_API_TOKENS (its roles apply); /healthz, /readyz, /metrics. See
    docs/console.md.
    """
    import uvicorn

    from infra.console.settings import ConsoleSettings

    process_logging("console")
    settings = guarded(lambda: load(ConsoleSettings))
    from infra.console.app import create_app  # after the settings: a bad one fails at once

    uvicorn.run(
        create_app(settings),
        host=settings.console_host,
        port=settings.console_port,
        log_config=None,
    )


@click.command()
@click.option("--once", is_flag=True, help="One pass over every stream, then exit.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per stream pruned.")
def prune(once: bool, as_json: bool) -> None:
    """Delete retained events nobody needs any more, and print what went per stream.

    Only published events older than GAPLESS_RETENTION_AGE_SECONDS, and never past a
    registered consumer's progress or a live lease's pin. Each pass also deletes
    snapshot exports beyond the newest GAPLESS_EXPORTS_KEEP per stream (never one
    whose lease is live), their rows after GAPLESS_EXPORT_ROWS_RETENTION_SECONDS,
    export objects no row wants, and leases ended GAPLESS_LEASE_RETENTION_SECONDS
    ago. Without --once, a pass runs every
    GAPLESS_PRUNE_INTERVAL_SECONDS until SIGTERM (/healthz, /readyz and /metrics with
    GAPLESS_PRUNE_HTTP_PORT).
    """
    from producers.exports.retention import ExportRetention
    from producers.exports.settings import ExportSettings
    from producers.retention.pruner import StreamPruned
    from producers.retention.service import prune_once, run
    from producers.retention.settings import RetentionSettings

    settings = guarded(lambda: load(RetentionSettings))
    exports = ExportRetention.from_settings(guarded(lambda: load(ExportSettings)))

    def show(results: list[StreamPruned], quiet: bool) -> None:
        for r in results:
            if quiet and not r.deleted:
                continue
            emit(
                as_json,
                {
                    "stream": str(r.stream),
                    "deleted": r.deleted,
                    "pruned_through": r.pruned_through,
                    "limited_by": r.limited_by,
                },
                f"{r.stream!s:<32} deleted {r.deleted:>8}  pruned through"
                f" {r.pruned_through:>9}  limited by {r.limited_by}",
            )

    if once:
        results = prune_once(settings, exports.sweep)
        show(results, quiet=False)
        if not results:
            echo("no stream has published events left to prune")
        return
    process_logging("prune")
    run(settings, lambda results: show(results, quiet=True), after=exports.sweep)


@click.command()
def agents() -> None:
    """Run the product agents (a Faust worker) until SIGTERM (a deployable process)."""
    import logging
    import os
    import sys

    import faust

    from infra.broker_wait import lost_broker_at_start, wait_for_broker
    from processors.app import create_app
    from processors.settings import AgentSettings
    from schemas.logs import logging_config
    from schemas.settings import LogSettings

    settings = guarded(lambda: load(AgentSettings))
    logs = guarded(lambda: load(LogSettings))
    process_logging("agents")
    # Faust exits at start-up when no broker answers: wait for one instead.
    wait_for_broker(settings)
    app = create_app(settings)
    # Faust's worker sets up logging itself as it starts: hand it the same JSON or text.
    worker = faust.Worker(
        app, loglevel=logs.log_level, logging_config=logging_config(logs, sys.stderr.isatty())
    )
    try:
        worker.execute_from_commandline()
    except SystemExit:
        if not lost_broker_at_start(worker):
            raise
        # The broker went away between the wait above and Faust's start: start
        # again in this process (same pid, same command line), waiting for it first.
        logging.getLogger(__name__).warning("the broker went away during start-up; again")
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


@click.command("sweep-jobs")
@click.option("--once", is_flag=True, help="One pass, print what it did, then exit.")
def sweep_jobs(once: bool) -> None:
    """Re-enqueue intake jobs left pending (the API's enqueue failed or never ran).

    Jobs are due GAPLESS_JOB_SWEEP_AFTER_SECONDS after they were recorded, then again
    after each failed attempt with exponential backoff and jitter. Without --once, a
    pass runs every GAPLESS_SWEEP_INTERVAL_SECONDS until SIGTERM (/healthz, /readyz and
    /metrics with GAPLESS_SWEEP_HTTP_PORT).
    """
    from producers.capture.intake.sweeper import run
    from producers.capture.settings import SweeperSettings

    settings = guarded(lambda: load(SweeperSettings))
    if not once:
        process_logging("sweep-jobs")
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


@click.command("resolver-worker")
def resolver_worker() -> None:
    """Run the capture worker until SIGTERM (a deployable process).

    Takes capture jobs from GAPLESS_JOBS_TOPIC (and, every
    GAPLESS_WORKER_SCAN_INTERVAL_SECONDS, due retries, expired claims and jobs whose
    message never came from the database), parses each capture with its source's
    adapter and resolves every product into a decision or a review case.
    /healthz, /readyz and /metrics with GAPLESS_WORKER_HTTP_PORT.
    """
    from producers.capture.worker.service import run
    from producers.capture.worker.settings import WorkerSettings

    process_logging("resolver-worker")
    settings = guarded(lambda: load(WorkerSettings))
    run(settings)
