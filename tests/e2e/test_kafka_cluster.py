"""Brokers of a three-node cluster die under load, and nothing is lost or doubled.

A private cluster (``infra.chaos.cluster``), the events topic on it with three
replicas and two in sync, the relay and the agents as deployed processes, writers
putting decisions through the resolver. Then the node leading most of the events
topic's partitions is SIGKILLed, and once the relay has published past that, a
second node: with one node left the controllers have no quorum and no write can
reach two replicas, so writes to Kafka wait, while the resolver's commits go on (the
relay holds them in the outbox). Then both nodes start again. Without a restart the
relay and the agents catch up: every stream's durable progress at its cursor, each
committed position applied or ignored once, the projection equal to the resolver's
items, and no stream's progress ever seen going backwards.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from db.settings import DatabaseSettings
from infra.chaos.cluster import busiest_leader, kafka_cluster
from infra.chaos.services import port_base
from infra.local import kafka
from infra.local.kafka_nodes import nodes
from infra.local.layout import Layout
from infra.processes import Deployed, free_port
from infra.topics import ensure_topics
from schemas.settings import KafkaSettings
from tests.fixtures.waits import wait_for
from tests.fixtures.writers import Writers

PREFIX = "kc-"
TENANTS = tuple(f"{PREFIX}{n}" for n in range(3))


@pytest.fixture()
def cluster() -> Iterator[Layout]:
    with kafka_cluster(print, port_base(), "kafka-cluster-test") as layout:
        yield layout


def _processes(bootstrap: str, topic: str, logs: Path) -> list[Deployed]:
    relay_port, agents_port = free_port(), free_port()
    env = dict(
        os.environ,
        GAPLESS_KAFKA_BOOTSTRAP=bootstrap,
        GAPLESS_KAFKA_REPLICATION_FACTOR="3",
        GAPLESS_EVENTS_TOPIC=topic,
        # No resolver API here: nothing is pruned, so no gap needs a fill.
        GAPLESS_RESOLVER_URL=f"http://127.0.0.1:{free_port()}",
    )
    return [
        Deployed(
            "relay",
            ["relay"],
            {**env, "GAPLESS_RELAY_HTTP_PORT": str(relay_port)},
            logs / "relay.log",
            f"http://127.0.0.1:{relay_port}/readyz",
        ),
        Deployed(
            "agents",
            ["agents"],
            {
                **env,
                "GAPLESS_AGENTS_APP_ID": f"kafka-cluster-{uuid.uuid4().hex[:8]}",
                "GAPLESS_AGENTS_WEB_PORT": str(agents_port),
            },
            logs / "agents.log",
            f"http://127.0.0.1:{agents_port}/readyz",
        ),
    ]


def _per_stream(dsn: str, query: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(query, (PREFIX + "%",)).fetchall()
    return {str(t): int(p) for t, p in rows}


def _one(dsn: str, query: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, (PREFIX + "%",)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


class ProgressWatch:
    """Reads every stream's durable progress over and over, in a thread, and keeps
    any reading lower than the one before it."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.backwards: list[tuple[str, int, int]] = []
        self.readings = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProgressWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        last: dict[str, int] = {}
        while not self._stop.wait(0.1):
            now = _per_stream(
                self._dsn,
                "SELECT tenant_id, position FROM stream_progress WHERE tenant_id LIKE %s",
            )
            for stream, position in now.items():
                if position < last.get(stream, 0):
                    self.backwards.append((stream, last[stream], position))
                last[stream] = position
            self.readings += 1


@pytest.mark.slow
def test_nothing_is_lost_or_doubled_when_two_of_three_brokers_die_under_load(
    clean_db: DatabaseSettings, cluster: Layout, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap(cluster)
    topic = f"test.events.{uuid.uuid4().hex[:12]}"
    settings = KafkaSettings(
        kafka_bootstrap=bootstrap, events_topic=topic, kafka_replication_factor=3
    )
    ensure_topics(settings, print)
    processes = _processes(bootstrap, topic, tmp_path)
    writers = Writers(clean_db, TENANTS, pause_s=0.02)
    final: dict[str, int] = {}

    def cursors() -> dict[str, int]:
        return _per_stream(
            clean_db.resolver_dsn,
            "SELECT tenant_id, position FROM stream_cursor WHERE tenant_id LIKE %s",
        )

    def published() -> dict[str, int]:
        return _per_stream(
            clean_db.resolver_dsn,
            "SELECT tenant_id, published_position FROM stream_publication WHERE tenant_id LIKE %s",
        )

    def held_back() -> int:
        done = published()
        return sum(p - done.get(t, 0) for t, p in cursors().items())

    try:
        with ProgressWatch(clean_db.product_dsn) as watch:
            for p in processes:
                p.start()
            wait_for(lambda: all(p.health() == 200 for p in processes), "both ready", 120)
            writers.start()
            wait_for(lambda: sum(published().values()) >= 30, "the first events published", 60)

            first = busiest_leader(bootstrap, topic)
            kafka.kill_node(cluster, first, print)
            # The partitions move to the other two nodes and publishing goes on.
            moved_past = sum(cursors().values()) + 10
            wait_for(
                lambda: sum(published().values()) >= moved_past,
                "publishing with one node dead",
                90,
            )

            second = next(n.node_id for n in nodes(cluster) if n.node_id != first)
            kafka.kill_node(cluster, second, print)
            # One node left: nothing reaches two replicas, the commits go on.
            wait_for(lambda: held_back() >= 30, "commits held in the outbox", 90)
            assert all(p.alive() for p in processes), "\n".join(p.tail() for p in processes)

            kafka.start(cluster, print)
            # Writes reach Kafka again, and the writers go on a little longer.
            again = sum(cursors().values()) + 30
            wait_for(lambda: sum(published().values()) >= again, "publishing again", 120)
            writers.stop()
            final = cursors()
            wait_for(lambda: published() == final, "every stream published", 180)
            wait_for(
                lambda: (
                    _per_stream(
                        clean_db.product_dsn,
                        "SELECT tenant_id, position FROM stream_progress WHERE tenant_id LIKE %s",
                    )
                    == final
                ),
                "progress at every cursor",
                180,
            )
            assert all(p.health() == 200 for p in processes)
        assert watch.readings > 10
        assert watch.backwards == [], watch.backwards
    finally:
        writers.stop()
        for p in reversed(processes):
            p.stop()
    logs = "\n".join(p.tail() for p in processes)
    for p in processes:
        assert p.popen is not None and p.popen.returncode in (0, -signal.SIGTERM), (
            f"{p.name} exited with {p.popen.returncode if p.popen else None}\n{logs}"
        )

    committed = sum(final.values())
    assert set(final) == set(TENANTS) and committed == 3 * writers.done
    counted = _one(
        clean_db.product_dsn,
        "SELECT sum(applied_count + ignored_count) FROM stream_progress WHERE tenant_id LIKE %s",
    )
    assert counted == committed, logs
    items = "SELECT tenant_id, item_id, revision FROM {} WHERE tenant_id LIKE %s ORDER BY 1, 2"
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        accepted = conn.execute(items.format("catalog_item"), (PREFIX + "%",)).fetchall()
    with psycopg.connect(clean_db.product_dsn) as conn:
        projected = conn.execute(items.format("product_item"), (PREFIX + "%",)).fetchall()
    assert projected == accepted
