"""The broker's configuration: today's listeners unless a proxied one is asked for."""

from __future__ import annotations

from pathlib import Path

from infra.chaos.proxy import PortBlock, kafka_listener
from infra.local.kafka import ProxiedListener, server_properties
from infra.local.layout import Layout

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
    proxied = _properties(server_properties(LAYOUT, ProxiedListener(18485, 18472)))
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
