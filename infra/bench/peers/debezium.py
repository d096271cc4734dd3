"""Our relay against Debezium's outbox EventRouter over the same committed rows.

Our side is the deployed ``gapless relay`` process (``python -m infra.cli relay``),
not ``Relay.run_once`` in the bench's process as phase (b) runs it: Debezium runs as
a process of its own (a Kafka Connect JVM), and the kill test needs a process to
``kill -9``. Each relay start points it at a topic of its own.

Steps (``measure_outbox_peers``), every row written by ``twin_outbox`` into both outboxes:

1. start the Connect worker, wait for the connector to run, stop its task (Connect's
   STOPPED state: no replication connection, so nothing decodes the slot meanwhile);
2. for batch 1 and batch 100: commit a backlog of ``DRAIN_BACKLOG_FACTOR`` times
   ``rows`` rows in transactions of that many rows with neither side reading; the
   relay drains it (started for it, then stopped), then Debezium (its task resumed,
   then stopped). The rate is the backlog's arrival span at the broker, first append
   to last, so neither start-up counts;
3. for batch 1 and batch 100: with both sides running, a paced load of twin
   transactions; commit (the writer's clock when COMMIT returned) to the broker's
   append time, p50 and p99, for each side;
4. a backlog of ``KILL_BACKLOG_FACTOR`` times ``rows`` rows at batch 100, then for each
   side: start it, ``kill -9`` it once a quarter, a half and three quarters of the rows
   have arrived, starting it again after each, and wait for every row; what arrived
   more than once is the side's duplicates;
5. stop the worker (the slot and publication are dropped by ``twin_outbox``).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from infra.bench.peers.connect import ConnectWorker, Source
from infra.bench.peers.topic_reader import (
    Drain,
    TopicReader,
    create_topics,
    delete_topics,
    drain_of,
)
from infra.bench.peers.twin_outbox import (
    TABLE,
    Replication,
    write_backlog,
    write_paced,
)
from infra.bench.rebuild_deployed import process_env
from infra.bench.sandbox import Echo, Sandbox
from infra.processes import Deployed, free_port

BATCHES = (1, 100)
LIVE_TRANSACTIONS_PER_S = {1: 100.0, 100: 10.0}
"""The paced load of step 3: 100 rows/s at batch 1, 1,000 rows/s at batch 100; well
below either side's backlog rate, so latency is not queueing behind a backlog."""
LIVE_ROWS = {1: 500, 100: 5_000}
"""Rows timed in step 3 (fewer when ``--rows`` is smaller): about 5 s each."""
START_TIMEOUT_S = 120.0
KILL_FRACTIONS = (0.25, 0.5, 0.75)
"""Step 4 kills each side when these shares of the backlog have arrived, restarting
it after each: one kill can land just after a side recorded its progress and cost
nothing, three show what a side re-sends on average."""
KILL_BACKLOG_FACTOR = 5
"""Step 4's backlog is this many times ``rows``: large enough that neither side has
sent everything by the time the reader sees the last mark and the kill lands."""
KILL_SETTLE_S = 0.3
DRAIN_BACKLOG_FACTOR = 5
"""Step 2's backlog is this many times ``rows``: at 20,000 rows the relay's drain took
80 ms, so one hiccup of a few tens of milliseconds moved its rate by half."""


def _reached(rows: int) -> Callable[[TopicReader], bool]:
    return lambda reader: reader.distinct >= rows


def _drain_timeout(rows: int) -> float:
    return 120.0 + rows / 500


@dataclass(frozen=True, slots=True)
class Latency:
    p50_ms: float
    p99_ms: float
    rows: int


@dataclass(frozen=True, slots=True)
class Kill:
    rows: int
    """The backlog's rows."""
    arrived_before_kills: tuple[int, ...]
    """Rows out (distinct) at each kill, counting what arrived just after it."""
    duplicates: int
    """Messages beyond one per row once every row had arrived, over all the kills."""

    @property
    def mid_backlog(self) -> bool:
        """Every kill came before every row was out (a too small backlog may not)."""
        return all(out < self.rows for out in self.arrived_before_kills)


@dataclass(frozen=True, slots=True)
class Side:
    drains: dict[int, Drain]
    latency: dict[int, Latency]
    kill: Kill


@dataclass(frozen=True, slots=True)
class OutboxPeers:
    relay: Side
    debezium: Side
    connect_peak_rss_mb: float


def latency_of(committed: dict[bytes, float], reader: TopicReader) -> Latency:
    missing = len(committed.keys() - reader.first_seen_ms.keys())
    if missing:
        raise RuntimeError(f"{reader.topic}: {missing} of {len(committed)} rows never arrived")
    lags = sorted(max(reader.first_seen_ms[v] - at * 1000, 0.0) for v, at in committed.items())
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    return Latency(round(statistics.median(lags), 2), round(p99, 2), len(lags))


class OutboxRun:
    """The processes, topics and readers of steps 1-5."""

    def __init__(self, box: Sandbox, names: Replication, echo: Echo) -> None:
        self.box = box
        self.echo = echo
        self.topics: list[str] = []
        logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.logs = logs
        params = conninfo_to_dict(box.databases.resolver_dsn)
        source = Source(
            host=str(params.get("host") or "127.0.0.1"),
            port=int(params.get("port") or 5432),
            user=str(params.get("user") or "postgres"),
            dbname=str(params["dbname"]),
            table=TABLE,
            publication=names.publication,
            slot=names.slot,
        )
        self.connect = ConnectWorker(
            name=f"bench-{box.run_id}-debezium",
            bootstrap=box.bootstrap,
            source=source,
            work_dir=logs.parent / "connect" / f"run-{box.run_id}",
            log=logs / f"bench-{box.run_id}-connect.log",
        )
        self.relay: Deployed | None = None
        self.connect_peak_rss_mb = 0.0

    def topic(self, side: str, phase: str) -> str:
        name = self.box.topic(f"peers-{side}-{phase}")
        if name not in self.topics:
            create_topics(self.box.bootstrap, [name])
            self.topics.append(name)
        return name

    def reader(self, topic: str) -> TopicReader:
        return TopicReader(self.box.bootstrap, topic, self.box.consumer_group)

    def start_relay(self, topic: str) -> Deployed:
        port = free_port()
        env = process_env(self.box, free_port(), free_port())
        env.update(GAPLESS_EVENTS_TOPIC=topic, GAPLESS_RELAY_HTTP_PORT=str(port))
        relay = Deployed(
            "relay",
            ["relay"],
            env,
            self.logs / f"bench-{self.box.run_id}-relay.log",
            f"http://127.0.0.1:{port}/readyz",
        )
        relay.start()
        self.relay = relay
        return relay

    def stop_relay(self) -> None:
        if self.relay is not None:
            self.relay.stop()
            self.relay = None

    def sample_connect(self) -> None:
        from infra.bench.memory import rss_mb

        if self.connect.alive():
            self.connect_peak_rss_mb = max(self.connect_peak_rss_mb, rss_mb(self.connect.pid))

    def close(self) -> None:
        self.stop_relay()
        self.connect.stop()
        delete_topics(self.box.bootstrap, self.topics)

    # Step 2 ---------------------------------------------------------------

    def drains(self, rows: int, batch: int) -> tuple[Drain, Drain]:
        relay_topic = self.topic("relay", f"b{batch}")
        dbz_topic = self.topic("debezium", f"b{batch}")
        self.echo(f"peers: a backlog of {rows} rows in transactions of {batch}")
        values = set(write_backlog(self.box, f"peers-b{batch}-", rows, batch, dbz_topic))
        timeout = _drain_timeout(rows)

        def all_in(reader: TopicReader) -> bool:
            return reader.distinct >= len(values)

        reader = self.reader(relay_topic)
        try:
            relay = self.start_relay(relay_topic)
            reader.read_until(all_in, timeout, relay.require_alive)
            self.stop_relay()
            ours = drain_of(reader, values)
        finally:
            reader.close()
        reader = self.reader(dbz_topic)
        try:
            self.connect.resume()
            reader.read_until(all_in, timeout, self._alive_connect)
            self.connect.stop_tasks()
            theirs = drain_of(reader, values)
        finally:
            reader.close()
        self.echo(
            f"peers: batch {batch}: relay {ours.per_second:,.0f} rows/s,"
            f" Debezium {theirs.per_second:,.0f} rows/s"
        )
        return ours, theirs

    def _alive_connect(self) -> None:
        self.connect.require_alive()
        self.sample_connect()

    # Step 3 ---------------------------------------------------------------

    def latencies(self, rows: int, batch: int) -> tuple[Latency, Latency]:
        relay_topic = self.topic("relay", f"live-b{batch}")
        dbz_topic = self.topic("debezium", f"live-b{batch}")
        timed = max(batch, min(rows, LIVE_ROWS[batch]))
        transactions = timed // batch
        per_second = LIVE_TRANSACTIONS_PER_S[batch]
        readers = (self.reader(relay_topic), self.reader(dbz_topic))
        try:
            relay = self.start_relay(relay_topic)
            relay.wait_ready(START_TIMEOUT_S)
            self.connect.resume()

            def alive() -> None:
                relay.require_alive()
                self._alive_connect()

            # One transaction through both before the clock: both sides are reading.
            warm = write_paced(self.box, f"peers-live{batch}-w", 1, 1, 1.0, dbz_topic)
            for reader in readers:
                reader.read_until(lambda r: warm.keys() <= r.first_seen_ms.keys(), 60, alive)
            self.echo(
                f"peers: {transactions} transactions of {batch} at {per_second:g}/s,"
                " both sides following"
            )
            committed = write_paced(
                self.box, f"peers-live{batch}-", transactions, batch, per_second, dbz_topic
            )
            for reader in readers:
                reader.read_until(
                    lambda r: committed.keys() <= r.first_seen_ms.keys(),
                    _drain_timeout(timed),
                    alive,
                )
            self.stop_relay()
            self.connect.stop_tasks()
            ours, theirs = (latency_of(committed, r) for r in readers)
        finally:
            for reader in readers:
                reader.close()
        self.echo(
            f"peers: batch {batch}: commit -> Kafka p50/p99 relay {ours.p50_ms}/{ours.p99_ms} ms,"
            f" Debezium {theirs.p50_ms}/{theirs.p99_ms} ms"
        )
        return ours, theirs

    # Step 4 ---------------------------------------------------------------

    def kills(self, rows: int) -> tuple[Kill, Kill]:
        batch = 100
        relay_topic = self.topic("relay", "kill")
        dbz_topic = self.topic("debezium", "kill")
        self.echo(f"peers: a backlog of {rows} rows for the kill -9 test")
        values = set(write_backlog(self.box, "peers-kill-", rows, batch, dbz_topic))
        timeout = _drain_timeout(rows)
        marks = [max(1, int(len(values) * f)) for f in KILL_FRACTIONS]

        def all_in(reader: TopicReader) -> bool:
            return values <= reader.first_seen_ms.keys()

        def out_at_kill(reader: TopicReader, side: str) -> int:
            # What arrives after the kill was sent before it: count it as out.
            reader.drain(quiet=KILL_SETTLE_S)
            self.echo(f"peers: {side} killed with {reader.distinct} of {len(values)} rows out")
            return reader.distinct

        reader = self.reader(relay_topic)
        try:
            out: list[int] = []
            relay = self.start_relay(relay_topic)
            for mark in marks:
                reader.read_until(_reached(mark), timeout, relay.require_alive)
                relay.kill()
                out.append(out_at_kill(reader, "relay"))
                relay = self.start_relay(relay_topic)
            reader.read_until(all_in, timeout, relay.require_alive)
            reader.drain()
            self.stop_relay()
            ours = Kill(len(values), tuple(out), reader.duplicates)
        finally:
            reader.close()
        reader = self.reader(dbz_topic)
        try:
            out = []
            self.connect.resume()
            for mark in marks:
                reader.read_until(_reached(mark), timeout, self._alive_connect)
                self.connect.kill()
                out.append(out_at_kill(reader, "Kafka Connect"))
                self.connect.start(self.echo)
            reader.read_until(all_in, timeout, self._alive_connect)
            reader.drain()
            theirs = Kill(len(values), tuple(out), reader.duplicates)
        finally:
            reader.close()
        self.echo(
            f"peers: duplicates after {len(marks)} kills -9: relay {ours.duplicates},"
            f" Debezium {theirs.duplicates}"
        )
        return ours, theirs


def measure_outbox_peers(box: Sandbox, names: Replication, rows: int, echo: Echo) -> OutboxPeers:
    """Steps 1-5 of the module docstring."""
    run = OutboxRun(box, names, echo)
    try:
        echo(f"peers: starting Kafka Connect (REST :{run.connect.rest_port}) with Debezium")
        run.connect.start(echo)
        run.connect.wait_state("RUNNING", START_TIMEOUT_S)
        run.sample_connect()
        run.connect.stop_tasks()
        drains = {b: run.drains(rows * DRAIN_BACKLOG_FACTOR, b) for b in BATCHES}
        latencies = {b: run.latencies(rows, b) for b in BATCHES}
        kills = run.kills(rows * KILL_BACKLOG_FACTOR)
        run.sample_connect()
    finally:
        run.close()
    return OutboxPeers(
        relay=Side(
            {b: d[0] for b, d in drains.items()}, {b: x[0] for b, x in latencies.items()}, kills[0]
        ),
        debezium=Side(
            {b: d[1] for b, d in drains.items()}, {b: x[1] for b, x in latencies.items()}, kills[1]
        ),
        connect_peak_rss_mb=round(run.connect_peak_rss_mb, 1),
    )
