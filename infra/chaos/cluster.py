"""A private three-node Kafka cluster and which node leads what, and a private
PostgreSQL formation (a primary and a standby under pg_auto_failover).

The cluster's faults are its nodes' deaths, and killing a node of the cluster
``gapless up`` runs would break everyone else's work on the machine; so the
broker-death tests and the campaign's cluster mode start one of their own with
the same launcher (``infra.local.kafka``), under ``<local dir>/<name>`` on the
campaign's port block (``infra.chaos.services``): node *i* on base + 96 + 2(*i* - 1),
its controller one above. The broker's jars are linked from the main local directory.
The failover tests' formation likewise: its two nodes on base + 6 and + 7, its
monitor on + 8 (``infra.local.postgres_ha``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from confluent_kafka.admin import AdminClient

from infra.local import kafka, postgres_ha
from infra.local.layout import Layout, current_layout
from schemas.settings import client_config

Echo = Callable[[str], None]

KAFKA_CLUSTER = 96
"""The offset, from the campaign's port base, of the cluster's first node's port."""
PG_FORMATION = 6
"""The offset of a formation's first node's port (the second +1, the monitor +2)."""
NODES = 3


def cluster_layout(main: Layout, base: int, local: Path) -> Layout:
    """A three-node layout at ``local`` on the port block at ``base``; every other
    service as ``main`` has it."""
    return Layout(
        local=local,
        pg_port=main.pg_port,
        kafka_port=base + KAFKA_CLUSTER,
        kafka_controller_port=base + KAFKA_CLUSTER + 1,
        s3_port=main.s3_port,
        registry_port=main.registry_port,
        registry_management_port=main.registry_management_port,
        kafka_brokers=NODES,
    )


@contextlib.contextmanager
def kafka_cluster(echo: Echo, base: int, name: str = "kafka-cluster") -> Iterator[Layout]:
    """Start a fresh three-node cluster on the port block at ``base``
    (``infra.chaos.services.port_base``); stop it and remove its directory on the way
    out, whatever failed."""
    main = current_layout()
    layout = cluster_layout(main, base, main.local / name)
    kafka.stop(layout, echo)  # left over from a run that was itself killed
    shutil.rmtree(layout.local, ignore_errors=True)
    layout.ensure_dirs()
    libs = layout.local / "kafka" / "libs"
    libs.parent.mkdir(parents=True, exist_ok=True)
    libs.symlink_to(kafka.resolved_libs(main, echo))
    try:
        kafka.start(layout, echo)
        yield layout
    finally:
        kafka.stop(layout, echo)
        shutil.rmtree(layout.local, ignore_errors=True)


@contextlib.contextmanager
def pg_formation(
    echo: Echo, base: int, standby: str, name: str = "pg-formation"
) -> Iterator[Layout]:
    """Start a fresh primary and ``standby`` (``sync`` or ``async``) standby on the
    port block at ``base``; stop them and remove their directory on the way out."""
    main = current_layout()
    layout = dataclasses.replace(
        main, local=main.local / name, pg_port=base + PG_FORMATION, pg_standby=standby
    )
    postgres_ha.stop(layout, echo)  # left over from a run that was itself killed
    shutil.rmtree(layout.local, ignore_errors=True)
    layout.ensure_dirs()
    try:
        postgres_ha.start(layout, echo)
        yield layout
    finally:
        postgres_ha.stop(layout, echo)
        shutil.rmtree(layout.local, ignore_errors=True)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition of ``topic`` and the node id leading it (-1: none)."""
    admin = AdminClient(client_config(bootstrap, {"log_level": 0}))
    metadata = admin.list_topics(topic, timeout=10)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise RuntimeError(f"no metadata for topic {topic}: {found.error if found else None}")
    return {p.id: p.leader for p in found.partitions.values()}


def busiest_leader(bootstrap: str, topic: str) -> int:
    """The node leading most of ``topic``'s partitions (the lowest id among equals)."""
    counts = Counter(n for n in leaders(bootstrap, topic).values() if n >= 0)
    if not counts:
        raise RuntimeError(f"no partition of {topic} has a leader")
    return min(counts, key=lambda n: (-counts[n], n))
