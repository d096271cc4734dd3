"""The campaign's own PostgreSQL cluster, Kafka broker, S3 server and schema registry.

The campaign restarts PostgreSQL, SIGKILLs the broker, stops the object store and
restarts or stops the registry;
doing that to the services ``gapless up`` runs would break everyone else's work on
the machine (tests, the demo, a developer's terminal). So it starts private ones
with the same launchers (``infra.local``), under a ``Layout`` of its own
(``<local dir>/chaos``) on a block of ports of its own:

- ``GAPLESS_CHAOS_PORT_BASE`` (default 17100): PostgreSQL on base, the broker on
  base+1 (its controller base+2), versitygw on base+3, the registry on base+4 (its
  management port base+5; its schemas in the campaign's PostgreSQL, as ``gapless up``
  keeps them), the campaign's processes' HTTP ports from base+10 up to base+79, and
  the TCP fault proxy's block (``infra.chaos.proxy.PortBlock``) from base+80 to base+95,
  and a three-node Kafka cluster's ports from base+96 to base+101 (``infra.chaos.cluster``).

The broker runs with its proxied listener from the start (and again after every
SIGKILL), so the processes reach it, PostgreSQL and the object store through
toxiproxy (``proxies``), while the campaign's own clients (workload, sampler,
checks) go direct: a network fault cuts the pipeline, never the judge. The processes
reach the registry directly: its faults are its own restart and outage, and every
process talks to it only for an id it has not cached (a writer's first event of a
kind, a reader's first message of a writer schema).

The broker's jars, the registry's application and the gateway's and the proxy's
binaries are linked from the main local directory when it has them (no second Maven
resolution or ``go install``). On the way out everything is stopped and the directory removed,
whatever failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from infra.chaos.cluster import busiest_leader, cluster_layout
from infra.chaos.proxy import PortBlock, Routes, ToxiproxyServer, kafka_listener
from infra.local import collector_keys, kafka, postgres, registry, s3, toxiproxy
from infra.local.api_token import dev_token, dev_token_grant
from infra.local.kafka_nodes import replication_factor
from infra.local.layout import Layout, current_layout

Echo = Callable[[str], None]

PORT_BASE_VARIABLE = "GAPLESS_CHAOS_PORT_BASE"
DEFAULT_PORT_BASE = 17_100
PROCESS_PORTS = range(10, 80)
"""Offsets from the base of the ports the campaign's processes listen on."""
PROXY_BLOCK = 80
"""The offset of the fault proxy's sixteen ports."""
PORTS_USED = PROXY_BLOCK + 16 + 6
"""The proxy's sixteen, then a three-node Kafka cluster's six (``infra.chaos.cluster``)."""


@dataclass(frozen=True)
class Private:
    layout: Layout
    port_base: int
    proxies: Routes
    """The fault proxy in front of each service, the processes' way to them."""

    @property
    def proxy_block(self) -> PortBlock:
        return PortBlock(self.port_base + PROXY_BLOCK)

    def process_port(self, index: int) -> int:
        """The ``index``-th HTTP port of the campaign's processes."""
        if index >= len(PROCESS_PORTS):
            raise ValueError(f"the campaign has {len(PROCESS_PORTS)} process ports")
        return self.port_base + PROCESS_PORTS[index]

    def environment(self) -> dict[str, str]:
        """The GAPLESS_* variables that point the pipeline at these services (as
        ``infra.local.local_environment`` does for the main ones)."""
        layout = self.layout
        creds = s3.credentials(layout)
        token = dev_token(layout)
        return {
            "GAPLESS_LOCAL_DIR": str(layout.local),
            "GAPLESS_RESOLVER_TOKEN": token,
            "GAPLESS_API_TOKENS": dev_token_grant(token),
            "GAPLESS_RESOLVER_DSN": postgres.dsn(layout, "resolver", postgres.APP_LOGIN),
            "GAPLESS_RESOLVER_MIGRATION_DSN": postgres.dsn(layout, "resolver"),
            "GAPLESS_PRODUCT_DSN": postgres.dsn(layout, "product"),
            "GAPLESS_CONTROL_DSN": postgres.dsn(layout, "control"),
            "GAPLESS_KAFKA_BOOTSTRAP": kafka.bootstrap(layout),
            "GAPLESS_KAFKA_REPLICATION_FACTOR": str(replication_factor(layout)),
            "GAPLESS_SCHEMA_REGISTRY_URL": registry.url(layout),
            "GAPLESS_S3_ENDPOINT": s3.endpoint(layout),
            "GAPLESS_S3_ACCESS_KEY": creds.access_key,
            "GAPLESS_S3_SECRET_KEY": creds.secret_key,
            "GAPLESS_EVIDENCE_BUCKET": s3.EVIDENCE_BUCKET,
            "GAPLESS_EXPORTS_BUCKET": s3.EXPORTS_BUCKET,
            "GAPLESS_COLLECTOR_JWT_PUBLIC_KEY": collector_keys.public_key_pem(layout),
            "GAPLESS_COLLECTOR_JWT_ISSUER": collector_keys.ISSUER,
            "GAPLESS_COLLECTOR_JWT_AUDIENCE": collector_keys.AUDIENCE,
        }

    # The faults. Each launcher call is the one `gapless up`/`down` makes.

    def restart_postgres(self, immediate: bool, down_s: float, echo: Echo) -> None:
        """Stop the cluster (``-m fast``, or ``-m immediate``: a crash, recovery at the
        next start), wait ``down_s`` and start it again."""
        if immediate:
            postgres.crash(self.layout, echo)
        else:
            postgres.stop(self.layout, echo)
        _sleep(down_s)
        postgres.start(self.layout, echo)

    def kill_broker(self, echo: Echo) -> None:
        kafka.kill_node(self.layout, 1, echo)

    def kill_leader(self, echo: Echo) -> None:
        """SIGKILL the node leading most of the events topic's partitions (a cluster)."""
        from infra.config import load
        from schemas.settings import KafkaSettings

        topic = load(KafkaSettings).events_topic
        kafka.kill_node(self.layout, busiest_leader(kafka.bootstrap(self.layout), topic), echo)

    def start_broker(self, echo: Echo) -> None:
        """Start what is not running: the single broker with its proxied listener, or
        a cluster's killed node."""
        cluster = self.layout.kafka_brokers > 1
        proxied = None if cluster else kafka_listener(self.proxy_block)
        kafka.start(self.layout, echo, proxied=proxied)

    def stop_object_store(self, echo: Echo) -> None:
        s3.stop(self.layout, echo)

    def start_object_store(self, echo: Echo) -> None:
        s3.start(self.layout, echo)

    def stop_registry(self, echo: Echo) -> None:
        registry.stop(self.layout, echo)

    def start_registry(self, echo: Echo) -> None:
        registry.start(self.layout, echo)


def _sleep(seconds: float) -> None:
    import time

    if seconds > 0:
        time.sleep(seconds)


def port_base() -> int:
    raw = os.environ.get(PORT_BASE_VARIABLE, "")
    try:
        base = int(raw) if raw else DEFAULT_PORT_BASE
    except ValueError:
        raise ValueError(f"{PORT_BASE_VARIABLE}={raw!r} is not a port number") from None
    if not 1024 <= base <= 32_768 - PORTS_USED:
        raise ValueError(f"{PORT_BASE_VARIABLE}={base}: the block must fit below 32768")
    return base


def _link_shared(main: Layout, layout: Layout, echo: Echo) -> None:
    """The broker's jars, the registry's application and the gateway's binary from
    the main local directory."""
    proxy = toxiproxy.binary(main)
    app = registry.unpacked(main, echo).relative_to(main.local)  # fetched once
    for source, target in (
        (main.local / "kafka" / "libs", layout.local / "kafka" / "libs"),
        (main.local / app, layout.local / app),
        (main.bin / "versitygw", layout.bin / "versitygw"),
        (proxy, toxiproxy.binary(layout)),
        (toxiproxy.stamp(main), toxiproxy.stamp(layout)),
    ):
        if source.exists() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source)


@contextlib.contextmanager
def private_services(echo: Echo, *, cluster: bool = False) -> Iterator[Private]:
    """Start PostgreSQL, the broker (``cluster``: three Kafka nodes, on the block's
    cluster ports, with no proxy in front), versitygw and the registry on the
    campaign's layout; stop them and remove their directory on the way out."""
    main = current_layout()
    base = port_base()
    layout = Layout(
        local=main.local / "chaos",
        pg_port=base,
        kafka_port=base + 1,
        kafka_controller_port=base + 2,
        s3_port=base + 3,
        registry_port=base + 4,
        registry_management_port=base + 5,
    )
    if cluster:
        nodes = cluster_layout(main, base, layout.local)
        layout = dataclasses.replace(
            layout,
            kafka_port=nodes.kafka_port,
            kafka_controller_port=nodes.kafka_controller_port,
            kafka_brokers=nodes.kafka_brokers,
        )
    # Left over from a campaign that was itself killed: its servers first.
    _stop_all(layout, echo)
    shutil.rmtree(layout.local, ignore_errors=True)
    layout.ensure_dirs()
    toxiproxy.ensure_binary(main, echo)  # built once, for every campaign after
    _link_shared(main, layout, echo)
    block = PortBlock(base + PROXY_BLOCK)
    listener = None if cluster else kafka_listener(block)
    server: ToxiproxyServer | None = None
    try:
        for launcher in (postgres, s3, registry):
            launcher.check_ports(layout)
        kafka.check_ports(layout, listener)
        postgres.start(layout, echo)
        kafka.start(layout, echo, proxied=listener)
        s3.start(layout, echo)
        registry.start(layout, echo)
        server = ToxiproxyServer.start(layout, block, layout.log_file("toxiproxy"), echo)
        yield Private(layout, base, Routes.create(server, layout, block))
    finally:
        if server is not None:
            server.stop()
        _stop_all(layout, echo)
        shutil.rmtree(layout.local, ignore_errors=True)
        echo(f"removed {layout.local}")


def _stop_all(layout: Layout, echo: Echo) -> None:
    if not layout.local.exists():
        return
    for stop in (registry.stop, s3.stop, kafka.stop, postgres.stop):
        try:
            stop(layout, echo)
        except Exception as exc:  # keep stopping the others; the cause is echoed
            echo(f"stopping: {exc}")
