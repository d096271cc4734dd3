"""The brokers' configuration: today's listeners unless a proxied one is asked for; a
cluster's nodes, quorum and replication."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from infra.chaos.proxy import PortBlock, kafka_listener
from infra.local.errors import ServiceError
from infra.local.kafka import formatted_cluster_id
from infra.local.kafka_nodes import ProxiedListener, bootstrap, nodes, server_properties
from infra.local.layout import Layout, current_layout

LAYOUT = Layout(
    Path("/nowhere"), pg_port=1, kafka_port=19092, kafka_controller_port=19093, s3_port=2
)


def _properties(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def test_without_a_proxied_listener_the_broker_listens_as_before() -> None:
    props = _properties(server_properties(LAYOUT))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == props["listeners"]
    assert props["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"


def test_a_proxied_listener_is_advertised_at_the_proxy_and_changes_nothing_else() -> None:
    plain = _properties(server_properties(LAYOUT))
    proxied = _properties(server_properties(LAYOUT, proxied=ProxiedListener(18485, 18472)))
    assert proxied["listeners"] == plain["listeners"] + ",PROXIED://127.0.0.1:18485"
    assert proxied["advertised.listeners"] == (
        plain["advertised.listeners"] + ",PROXIED://127.0.0.1:18472"
    )
    assert proxied["listener.security.protocol.map"].endswith(",PROXIED:PLAINTEXT")
    changed = {k for k in plain if plain[k] != proxied[k]}
    assert changed == {"listeners", "advertised.listeners", "listener.security.protocol.map"}


def test_the_port_block_puts_the_broker_listener_behind_the_kafka_proxy() -> None:
    block = PortBlock(18470)
    assert kafka_listener(block) == ProxiedListener(port=18485, advertised_port=18472)
    assert (block.api, block.proxy(1), block.proxy(3)) == (18470, 18471, 18473)


CLUSTER = Layout(
    Path("/nowhere"),
    pg_port=1,
    kafka_port=19092,
    kafka_controller_port=19093,
    s3_port=2,
    kafka_brokers=3,
)


def test_a_cluster_is_three_voters_each_a_broker_on_ports_of_its_own() -> None:
    found = nodes(CLUSTER)
    assert [(n.name, n.port, n.controller_port) for n in found] == [
        ("kafka-1", 19092, 19093),
        ("kafka-2", 19094, 19095),
        ("kafka-3", 19096, 19097),
    ]
    assert len({n.data for n in found}) == 3
    assert bootstrap(CLUSTER) == "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"
    props = _properties(server_properties(CLUSTER, found[1]))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    )
    assert "controller.quorum.bootstrap.servers" not in props
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19095"
    assert props["log.dirs"] == str(found[1].data)


def test_a_cluster_replicates_every_topic_to_three_with_two_in_sync() -> None:
    props = _properties(server_properties(CLUSTER, nodes(CLUSTER)[0]))
    assert props["default.replication.factor"] == "3"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["min.insync.replicas"] == "2"
    assert props["unclean.leader.election.enable"] == "false"
    single = _properties(server_properties(LAYOUT))
    assert (single["default.replication.factor"], single["min.insync.replicas"]) == ("1", "1")
    assert bootstrap(LAYOUT) == "127.0.0.1:19092"


def test_a_cluster_takes_no_proxied_listener_and_refuses_overlapping_ports() -> None:
    with pytest.raises(ServiceError, match="single broker"):
        server_properties(CLUSTER, nodes(CLUSTER)[0], ProxiedListener(18485, 18472))
    crowded = dataclasses.replace(CLUSTER, kafka_controller_port=19094)
    with pytest.raises(ServiceError, match="overlap") as caught:
        nodes(crowded)
    assert "GAPLESS_LOCAL_KAFKA_CONTROLLER_PORT" in caught.value.hint


@pytest.mark.parametrize("raw", ["2", "0", "three", "-1"])
def test_a_broker_count_other_than_one_or_three_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("GAPLESS_LOCAL_KAFKA_BROKERS", raw)
    with pytest.raises(ServiceError, match="GAPLESS_LOCAL_KAFKA_BROKERS"):
        current_layout()


def test_the_broker_count_is_read_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GAPLESS_LOCAL_KAFKA_BROKERS", raising=False)
    assert current_layout().kafka_brokers == 1
    monkeypatch.setenv("GAPLESS_LOCAL_KAFKA_BROKERS", "3")
    assert current_layout().kafka_brokers == 3


def test_nodes_formatted_after_an_interrupted_start_take_the_first_ones_cluster_id(
    tmp_path: Path,
) -> None:
    cluster = dataclasses.replace(CLUSTER, local=tmp_path)
    assert formatted_cluster_id(cluster) is None  # a first start makes a new one
    first = nodes(cluster)[0]
    first.data.mkdir(parents=True)
    (first.data / "meta.properties").write_text("version=1\ncluster.id=Xy7_abc\nnode.id=1\n")
    # The start stopped here: the next one formats nodes 2 and 3 with node 1's id.
    assert formatted_cluster_id(cluster) == "Xy7_abc"
