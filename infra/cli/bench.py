"""The benchmark."""

from __future__ import annotations

import click

from infra.cli.output import echo, guarded


@click.command()
@click.option("--seconds", default=5.0, show_default=True, help="Duration of each phase.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench(seconds: float, as_json: bool) -> None:
    """Measure writer, relay, applier and end-to-end figures against baselines."""
    from infra.bench.run import run_bench

    guarded(lambda: run_bench(seconds, as_json, echo))
