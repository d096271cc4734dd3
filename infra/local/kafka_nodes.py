"""The local Kafka's nodes and each one's ``server.properties``.

``GAPLESS_LOCAL_KAFKA_BROKERS`` (``Layout.kafka_brokers``) picks the shape:

- 1 (the default): one KRaft node, broker and controller in one JVM, named
  ``kafka``, at home in ``.local/kafka``; its storage is formatted ``--standalone``
  (a one-voter quorum). Every internal topic makes do with one replica.
- 3: three such nodes, ``kafka-1`` … ``kafka-3``, each a broker and one of three
  controller voters (a static quorum: ``controller.quorum.voters``), at home in
  ``.local/kafka/cluster/node-<id>``. Node *i* listens on ``kafka_port + stride *
  (i - 1)`` and its controller on ``kafka_controller_port + stride * (i - 1)``.
  Topics default to three replicas with two in sync (``default.replication.factor``,
  ``min.insync.replicas``), the internal ones too: an ``acks=all`` write is on two
  machines before it is acknowledged, and one node may die without losing a write or
  stopping one. With two of three dead the controllers have no quorum and the one
  left cannot shrink an in-sync set: writes wait until a node comes back.

The two shapes keep their data apart, so switching is ``gapless down``, then ``up``
with the other count; the first cluster start formats three fresh nodes.

A test that puts a TCP fault proxy between the clients and a single broker starts it
with a ``ProxiedListener`` as well: clients reach a broker at the address its
metadata advertises, not at the bootstrap address, so going through a proxy takes
a listener of its own advertised at the proxy's port. The PLAINTEXT listener and
every default stay as they are; without the option the extra listener is not there.
A cluster has no proxied listener: its faults are its nodes' deaths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.local.errors import ServiceError
from infra.local.layout import HOST, Layout

NAME = "kafka"

PROXIED = "PROXIED"
"""The name of the optional listener a fault proxy forwards to."""

CLUSTER_REPLICATION_FACTOR = 3
CLUSTER_MIN_INSYNC = 2

SESSION_TIMEOUT_MS = 6000
"""How long the controllers wait for a silent broker's heartbeat before fencing it
(moving its partitions' leadership and taking it out of their in-sync sets); 9 s by
default. A SIGKILLed node stalls the partitions it led about this long."""


@dataclass(frozen=True)
class ProxiedListener:
    """A listener on ``port`` that tells clients to connect to ``advertised_port``
    (where a proxy listens and forwards to ``port``)."""

    port: int
    advertised_port: int


@dataclass(frozen=True)
class Node:
    """One KRaft node: its id, the name of its pid and log files, its ports, its home."""

    node_id: int
    name: str
    port: int
    controller_port: int
    home: Path

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def config(self) -> Path:
        return self.home / "server.properties"


def kafka_dir(layout: Layout) -> Path:
    return layout.local / NAME


def single(layout: Layout) -> Node:
    """The node of the one-broker shape (whatever ``kafka_brokers`` says)."""
    return Node(1, NAME, layout.kafka_port, layout.kafka_controller_port, kafka_dir(layout))


def cluster_nodes(layout: Layout, count: int) -> list[Node]:
    """The nodes of a ``count``-node cluster on ``layout``'s ports."""
    stride = layout.kafka_port_stride
    return [
        Node(
            i,
            f"{NAME}-{i}",
            layout.kafka_port + stride * (i - 1),
            layout.kafka_controller_port + stride * (i - 1),
            kafka_dir(layout) / "cluster" / f"node-{i}",
        )
        for i in range(1, count + 1)
    ]


def nodes(layout: Layout) -> list[Node]:
    """The nodes ``layout`` asks for; ``ServiceError`` when two of their ports meet."""
    found = (
        [single(layout)]
        if layout.kafka_brokers == 1
        else cluster_nodes(layout, layout.kafka_brokers)
    )
    ports = [p for n in found for p in (n.port, n.controller_port)]
    if len(set(ports)) != len(ports):
        raise ServiceError(
            f"the Kafka nodes' ports {ports} overlap (stride {layout.kafka_port_stride})",
            "set GAPLESS_LOCAL_KAFKA_CONTROLLER_PORT to GAPLESS_LOCAL_KAFKA_PORT + 1",
        )
    return found


def bootstrap(layout: Layout) -> str:
    """Every node's broker address, comma-separated."""
    return ",".join(n.address for n in nodes(layout))


def replication_factor(layout: Layout) -> int:
    """What topics created for this layout are replicated to."""
    return 1 if layout.kafka_brokers == 1 else CLUSTER_REPLICATION_FACTOR


def min_insync(layout: Layout) -> int:
    return 1 if layout.kafka_brokers == 1 else CLUSTER_MIN_INSYNC


def _replication_properties(layout: Layout) -> str:
    rf, isr = replication_factor(layout), min_insync(layout)
    if rf == 1:
        head = "# One broker: every internal topic must make do with one replica."
    else:
        head = (
            f"# A cluster: every topic, the internal ones too, on {rf} nodes, {isr} of them"
            " in sync\n# before an acks=all write is acknowledged."
        )
    return f"""{head}
default.replication.factor={rf}
offsets.topic.replication.factor={rf}
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={isr}
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={isr}
min.insync.replicas={isr}
unclean.leader.election.enable=false
"""


def server_properties(
    layout: Layout, node: Node | None = None, proxied: ProxiedListener | None = None
) -> str:
    """``node``'s ``server.properties`` (the single node's by default), with the
    ``PROXIED`` listener if asked (a single node only)."""
    node = node or single(layout)
    controller = f"{HOST}:{node.controller_port}"
    listeners = f"PLAINTEXT://{node.address},CONTROLLER://{controller}"
    advertised = listeners
    protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    if proxied is not None:
        if layout.kafka_brokers != 1:
            raise ServiceError(
                "a proxied listener is for a single broker, not a cluster",
                "unset GAPLESS_LOCAL_KAFKA_BROKERS for a run that proxies the broker",
            )
        listeners += f",{PROXIED}://{HOST}:{proxied.port}"
        advertised += f",{PROXIED}://{HOST}:{proxied.advertised_port}"
        protocols += f",{PROXIED}:PLAINTEXT"
    if layout.kafka_brokers == 1:
        quorum = f"controller.quorum.bootstrap.servers={controller}"
    else:
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes(layout))
        quorum = (
            f"controller.quorum.voters={voters}\n"
            f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}\n"
            "broker.heartbeat.interval.ms=1000"
        )
    return f"""\
# Written by infra/local/kafka.py on every start; edits here are overwritten.
process.roles=broker,controller
node.id={node.node_id}
{quorum}
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map={protocols}
log.dirs={node.data}
num.partitions=6
auto.create.topics.enable=false
{_replication_properties(layout)}# Consumers in tests should not wait 3 s for a group to settle.
group.initial.rebalance.delay.ms=0
"""
