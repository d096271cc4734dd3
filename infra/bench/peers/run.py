"""``gapless bench peers``: the phase, in a sandbox of its own.

1. prepare the local services, check PostgreSQL decodes logically (``wal_level``);
2. in the bench's sandbox (its databases and topics, dropped afterwards), with
   Debezium's outbox table, publication and slot (``twin_outbox.replication``):
   our relay against Debezium (``debezium.measure_outbox_peers``);
3. the slot and publication dropped; our agents (one process, then two in one
   consumer group) against pyeventsourcing's ProjectionRunner over ``rows`` events
   each;
4. print the table or the JSON object, with the machine's load before and after.
"""

from __future__ import annotations

import json

import psycopg

from infra.bench.machine import MachineLoad
from infra.bench.peers.agents_side import measure_agents
from infra.bench.peers.debezium import measure_outbox_peers
from infra.bench.peers.eventsourcing_peer import measure_eventsourcing
from infra.bench.peers.report import PeersFigures, render_peers_table
from infra.bench.peers.twin_outbox import replication
from infra.bench.run import environment_of
from infra.bench.sandbox import Echo, sandbox

TOPICS = {"peers-agents1": 6, "peers-agents2": 6, "control": 1, "status": 1}
"""The sandbox's extra topics: the agents' events (one topic for one process, one for
two), control and status topics."""


def require_logical_decoding(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SHOW wal_level").fetchone()
    if row is None or row[0] != "logical":
        raise RuntimeError(
            f"PostgreSQL runs with wal_level={row[0] if row else '?'}; Debezium needs"
            " logical: `gapless down && gapless up` starts it so"
        )


def run_peers_bench(rows: int, as_json: bool, echo: Echo) -> None:
    """Steps 1-4 of the module docstring."""
    from db.settings import DatabaseSettings
    from infra.config import load, use_local_services
    from infra.provision import provision

    use_local_services()
    provision(echo)
    require_logical_decoding(load(DatabaseSettings).resolver_owner_dsn)
    machine = MachineLoad()
    with sandbox(echo, extra_topics=TOPICS) as box:
        environment = environment_of(box)
        with replication(box, echo) as names:
            outbox = measure_outbox_peers(box, names, rows, echo)
        agents = measure_agents(box, rows, echo)
        agents_two = measure_agents(box, rows, echo, processes=2)
        eventsourcing = measure_eventsourcing(box, rows, echo)
    environment.update(machine.finish())
    figures = PeersFigures(rows, outbox, agents, agents_two, eventsourcing, environment)
    if as_json:
        print(json.dumps(figures.as_dict()))
    else:
        print(render_peers_table(figures))
