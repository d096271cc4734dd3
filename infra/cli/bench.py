"""The benchmark."""

from __future__ import annotations

import click

from infra.cli.output import echo, guarded


@click.group(invoke_without_command=True)
@click.option("--seconds", default=5.0, show_default=True, help="Duration of each phase.")
@click.option(
    "--backlog",
    default=100_000,
    show_default=True,
    type=click.IntRange(min=1000),
    help="Events the deployed agents catch up (phase e).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def bench(ctx: click.Context, seconds: float, backlog: int, as_json: bool) -> None:
    """Measure writer, relay, applier and end-to-end figures against baselines, and
    the deployed agents catching up a backlog.

    `gapless bench rebuild` measures a shadow rebuild's recovery time instead;
    `gapless bench peers` compares the relay and agents with Debezium and
    pyeventsourcing."""
    if ctx.invoked_subcommand is not None:
        return
    from infra.bench.run import run_bench

    guarded(lambda: run_bench(seconds, as_json, echo, backlog))


@bench.command("rebuild")
@click.option(
    "--items", default=100_000, show_default=True, help="Accepted items in the rebuilt catalog."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_rebuild(items: int, as_json: bool) -> None:
    """Rebuild a seeded catalog through the control topic under a live write load, with
    the deployed resolver API, relay and agents: each phase's seconds, the RTO, the load
    against a bare COPY, the cutover pause, peak RSS; fails if the rebuilt generation is
    not the accepted state."""
    from infra.bench.rebuild import run_rebuild_bench

    guarded(lambda: run_rebuild_bench(items, as_json, echo))


@bench.command("peers")
@click.option(
    "--rows",
    default=20_000,
    show_default=True,
    help="Rows per backlog (and events per projection).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_peers(rows: int, as_json: bool) -> None:
    """Our relay against Debezium's outbox EventRouter on Kafka Connect (messages/s,
    commit -> Kafka p50/p99 at batch 1 and 100, duplicates after kill -9), and our
    agents against pyeventsourcing's ProjectionRunner (events/s), on the same
    PostgreSQL and Kafka; needs wal_level=logical (what `gapless up` starts)."""
    from infra.bench.peers.run import run_peers_bench

    guarded(lambda: run_peers_bench(rows, as_json, echo))
