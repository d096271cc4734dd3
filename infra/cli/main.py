"""The ``gapless`` command group: every command module's commands under one name."""

from __future__ import annotations

import click

from infra.cli import (
    bench,
    captures,
    chaos,
    collectors,
    consumers,
    demo,
    drill,
    evidence,
    fence,
    image,
    parked,
    pause,
    processes,
    quarantine,
    rebuild,
    services,
    sources,
    tail,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """gapless: a replay-safe catalog event pipeline on PostgreSQL and Kafka.

    Configuration comes from GAPLESS_* environment variables (see the README);
    commands that manage local services fill in the local ones themselves.
    """


for command in (
    services.up,
    services.down,
    services.status,
    services.migrate,
    processes.resolver_api,
    processes.relay,
    processes.agents,
    processes.read_api,
    processes.console,
    processes.resolver_worker,
    processes.sweep_jobs,
    processes.prune,
    image.image,
    evidence.evidence,
    evidence.evidence_sweeper,
    consumers.consumers,
    quarantine.quarantine,
    parked.parked,
    rebuild.rebuild,
    fence.fence_epoch,
    pause.pause,
    pause.resume,
    collectors.collectors,
    collectors.collector_token,
    sources.sources,
    captures.captures,
    tail.tail,
    demo.demo,
    bench.bench,
    chaos.chaos,
    drill.drill,
):
    main.add_command(command)


if __name__ == "__main__":
    main()
