"""The benchmark."""

from __future__ import annotations

import signal
from types import FrameType

import click

from infra.cli.output import echo, guarded


def _stop(signum: int, _frame: FrameType | None) -> None:
    """SIGTERM as an exit of the main thread, so every ``finally`` of the run (its
    processes stopped, its sandbox dropped) runs first."""
    raise SystemExit(128 + signum)


@click.group(invoke_without_command=True)
@click.option("--seconds", default=5.0, show_default=True, help="Duration of each phase.")
@click.option(
    "--backlog",
    default=100_000,
    show_default=True,
    type=click.IntRange(min=1000),
    help="Events the deployed agents catch up (phase e).",
)
@click.option(
    "--worker-products",
    default=10_000,
    show_default=True,
    type=click.IntRange(min=10),
    help="Products of the capture the deployed capture worker settles (phase g).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def bench(
    ctx: click.Context, seconds: float, backlog: int, worker_products: int, as_json: bool
) -> None:
    """Measure writer, relay, applier and end-to-end figures against baselines, the
    deployed agents catching up a backlog and the deployed capture worker settling a
    large capture.

    `gapless bench rebuild` measures a shadow rebuild's recovery time instead;
    `gapless bench worker` runs the capture worker's phase alone;
    `gapless bench api` runs the resolver API's phase alone;
    `gapless bench peers` compares the relay and agents with Debezium and
    pyeventsourcing; `gapless bench memory` follows the relay's and the agents'
    memory over a 1,000,000-event backlog.

    Stopped with SIGTERM (or Ctrl-C), a run stops the processes it started and drops
    its sandbox's databases and topics before it exits."""
    signal.signal(signal.SIGTERM, _stop)
    if ctx.invoked_subcommand is not None:
        return
    from infra.bench.run import run_bench

    guarded(lambda: run_bench(seconds, as_json, echo, backlog, worker_products))


@bench.command("rebuild")
@click.option(
    "--items", default=100_000, show_default=True, help="Accepted items in the rebuilt catalog."
)
@click.option(
    "--live-eps",
    default=200.0,
    show_default=True,
    type=click.FloatRange(min=3.0),
    help="Live writes, events/s, during the baseline and the rebuilds.",
)
@click.option(
    "--baseline-seconds",
    default=20.0,
    show_default=True,
    type=click.FloatRange(min=1.0),
    help="Live writes with no rebuild running, measured before the rebuild.",
)
@click.option(
    "--kill-phase",
    "kill_phases",
    multiple=True,
    type=click.Choice(["leased", "exporting", "loading", "catching_up", "cutting_over"]),
    help="Kill -9 the worker carrying a second rebuild in this phase (repeatable;"
    " default: exporting, loading and catching_up).",
)
@click.option(
    "--no-takeover", is_flag=True, help="No second rebuild, no kills (rebuild_takeover_s null)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_rebuild(
    items: int,
    live_eps: float,
    baseline_seconds: float,
    kill_phases: tuple[str, ...],
    no_takeover: bool,
    as_json: bool,
) -> None:
    """Rebuild a seeded catalog (items with listing mappings, attribute values, splits and
    shipping policies) through the control topic under a live write load, with the
    deployed resolver API, relay and two agents workers: each phase's seconds, the RTO,
    the load against a bare COPY of the same rows, the cutover pause, peak RSS, the live
    writes' p99 against a baseline with no rebuild, the ETA's error at halfway; then a
    second rebuild whose worker is killed in each phase asked for, timed until another
    worker carries on. Fails if a rebuilt generation is not the accepted state."""
    from infra.bench.rebuild import run_rebuild_bench
    from infra.bench.rebuild_takeover import DEFAULT_KILLS

    phases = () if no_takeover else (kill_phases or DEFAULT_KILLS)
    guarded(lambda: run_rebuild_bench(items, as_json, echo, live_eps, baseline_seconds, phases))


@bench.command("peers")
@click.option(
    "--rows",
    default=20_000,
    show_default=True,
    help="Events per projection and the latency rows' cap; the outbox backlogs are 5x this.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_peers(rows: int, as_json: bool) -> None:
    """Our relay against Debezium's outbox EventRouter on Kafka Connect (messages/s,
    commit -> Kafka p50/p99 at batch 1 and 100, duplicates after kill -9), and our
    agents against pyeventsourcing's ProjectionRunner (events/s), on the same
    PostgreSQL and Kafka; needs wal_level=logical (what `gapless up` starts)."""
    from infra.bench.peers.run import run_peers_bench

    guarded(lambda: run_peers_bench(rows, as_json, echo))


@bench.command("memory")
@click.option(
    "--events",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(min=1000),
    help="Events of the backlog.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_memory(events: int, as_json: bool) -> None:
    """The deployed relay's and agents' resident memory over a backlog seeded in the
    outbox: sampled every second, reported at 10, 50 and 100 % of it with the peak,
    and flat or not (100 % within 15 % of 10 %). Takes minutes at the default."""
    from infra.bench.backlog_memory import run_memory_bench

    guarded(lambda: run_memory_bench(events, as_json, echo))


@bench.command("scale")
@click.option(
    "--events",
    default=60_000,
    show_default=True,
    type=click.IntRange(min=10_000),
    help="Events of each round.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_scale(events: int, as_json: bool) -> None:
    """The deployed agents (1, 2 and 3 workers of one group) and relay (1 and 2
    processes) on a private three-broker Kafka cluster: events/s of each round and
    the CPU per event of each process, PostgreSQL and each broker. Starts and removes
    the cluster itself (ports from GAPLESS_CHAOS_PORT_BASE + 96); a few minutes."""
    from infra.bench.scale import run_scale_bench

    guarded(lambda: run_scale_bench(events, as_json, echo))


@bench.command("worker")
@click.option(
    "--products",
    default=10_000,
    show_default=True,
    type=click.IntRange(min=10),
    help="Products of the measured capture.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_worker(products: int, as_json: bool) -> None:
    """Phase (g) of `gapless bench` alone: the deployed API and capture worker take
    a first feed of a tenth of the products, then the measured capture; prints the
    products settled per second (first settled to last). Two to five minutes at the
    default on two cores."""
    from infra.bench.run import run_worker_bench

    guarded(lambda: run_worker_bench(products, as_json, echo))


@bench.command("api")
@click.option("--seconds", default=5.0, show_default=True, help="Duration of each round.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_api(seconds: float, as_json: bool) -> None:
    """Phase (h) of `gapless bench` alone: the deployed resolver API taking review
    decisions over HTTP from client processes, beside the same decisions recorded in
    process by those processes, then captures posted to its intake. Prints requests
    per second, p50 and p99, and CPU per request of each process."""
    from infra.bench.run import run_api_bench

    guarded(lambda: run_api_bench(seconds, as_json, echo))
