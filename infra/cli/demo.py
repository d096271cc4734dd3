"""The main job: the whole pipeline on a realistic workload."""

from __future__ import annotations

import sys

import click

from infra.cli.output import echo, guarded


@click.command()
@click.option("--events", default=20_000, show_default=True, help="Accepted changes to write.")
@click.option("--tenants", default=3, show_default=True, help="Tenants (each with 2 catalogs).")
@click.option("--writers", default=8, show_default=True, help="Concurrent writer threads.")
@click.option("--keep-running", is_flag=True, help="Leave services running afterwards.")
@click.option(
    "--chaos/--no-chaos", default=True, show_default=True, help="Kill -9 relay and agents once."
)
@click.option(
    "--drill/--no-drill",
    default=True,
    show_default=True,
    help="End with a restore drill on one stream of its own (about a minute).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def demo(
    events: int,
    tenants: int,
    writers: int,
    keep_running: bool,
    chaos: bool,
    drill: bool,
    as_json: bool,
) -> None:
    """Run the whole pipeline on a realistic workload and check the projection; end
    with a restore drill."""
    from infra.demo.run import run_demo
    from infra.drill.restore import demo_drill

    ends = demo_drill if drill else None
    ok = guarded(
        lambda: run_demo(events, tenants, writers, keep_running, as_json, echo, chaos, ends)
    )
    sys.exit(0 if ok else 1)
