"""``gapless chaos``: the fault campaign."""

from __future__ import annotations

import random
import signal
import sys
from types import FrameType

import click

from infra.cli.output import echo, guarded


@click.command()
@click.option("--kills", default=200, show_default=True, help="SIGKILLs of a random process.")
@click.option("--seconds", default=150.0, show_default=True, help="How long the faults go on.")
@click.option("--seed", type=int, default=None, help="Reproduce a campaign (default: random).")
@click.option(
    "--scale",
    is_flag=True,
    help="Two relays, three agents workers and two capture workers at once.",
)
@click.option(
    "--cluster",
    is_flag=True,
    help="Three Kafka nodes instead of one, topics replicated to all three with two in"
    " sync; each broker fault SIGKILLs the node leading most of the events topic's"
    " partitions and starts it again after the hold.",
)
@click.option("--pg-restarts", default=4, show_default=True, help="PostgreSQL restarts.")
@click.option(
    "--broker-restarts",
    default=3,
    show_default=True,
    help="Broker SIGKILLs (with --cluster: leader kills).",
)
@click.option(
    "--s3-outages", default=2, show_default=True, help="Times the object store goes away."
)
@click.option("--registry-restarts", default=1, show_default=True, help="Schema registry restarts.")
@click.option(
    "--registry-outages",
    default=1,
    show_default=True,
    help="Times the schema registry stops for 30 s (a writer and an agents worker are"
    " killed meanwhile, so they start without it).",
)
@click.option(
    "--proxy-faults",
    default=4,
    show_default=True,
    help="Connections dropped or stalled (past the clients' timeouts) by the TCP fault proxy.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def chaos(
    kills: int,
    seconds: float,
    seed: int | None,
    scale: bool,
    cluster: bool,
    pg_restarts: int,
    broker_restarts: int,
    s3_outages: int,
    registry_restarts: int,
    registry_outages: int,
    proxy_faults: int,
    as_json: bool,
) -> None:
    """Run the deployed pipeline on services of its own under random faults, then
    check it lost, doubled and mismatched nothing.

    Kills processes (also in narrow windows), restarts PostgreSQL (fast and
    immediate), SIGKILLs the broker, stops the object store, restarts and stops the
    schema registry and drops or stalls the processes' connections through toxiproxy
    at instants drawn from --seed, while decisions, captures, a rebuild and an epoch
    fence go on.
    Progress goes to stderr; the figures to stdout. Exits 1 on any violation,
    printing the seed that reproduces it. Services on GAPLESS_CHAOS_PORT_BASE
    (default 17100) and the next 101 ports.
    """
    from infra.chaos.campaign import Settings, run_campaign
    from infra.chaos.report import render

    chosen = seed if seed is not None else random.SystemRandom().randrange(1, 2**31)
    settings = Settings(
        seed=chosen,
        kills=kills,
        seconds=seconds,
        scale=scale,
        cluster=cluster,
        pg_restarts=pg_restarts,
        broker_restarts=broker_restarts,
        s3_outages=s3_outages,
        registry_restarts=registry_restarts,
        registry_outages=registry_outages,
        proxy_faults=proxy_faults,
    )
    echo(f"chaos: seed {chosen}")
    # SIGTERM (and SIGINT, which a shell's background job ignores) end the campaign
    # through its clean-up: its processes stopped, its services removed.
    signal.signal(signal.SIGTERM, _interrupt)
    report = guarded(lambda: run_campaign(settings, echo))
    click.echo(render(report, as_json))
    sys.exit(0 if report.ok else 1)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
