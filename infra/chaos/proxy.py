"""Network faults between the processes and PostgreSQL, Kafka and the object store,
through a real TCP fault proxy (toxiproxy, ``infra.local.toxiproxy`` builds it).

The interface, for whoever schedules faults::

    with proxied(layout, echo) as routes:           # pg, kafka, s3 proxies (see below)
        env = routes.environment(os.environ)        # DSNs, bootstrap, S3 endpoint
        fault = FAULTS["drop"](routes.pg)           # Drop, Stall, Down or Slow
        fault.apply()   # takes effect at once, returns at once
        ...             # the outage lasts as long as the caller waits
        fault.heal()    # idempotent; the proxy carries traffic again
        routes.heal_all()                           # every fault of every proxy

``proxied`` restarts the local broker with its proxied listener when it runs
without it, starts a server on sixteen ports from ``layout.proxy_port``
(``PortBlock``) and stops it at the end; ``ToxiproxyServer.start`` and
``Routes.create`` are the same in two steps.

A ``Fault`` has a ``kind`` (``drop``, ``stall``, ``down``, ``slow``) and a ``target``
(the proxy's name: ``pg``, ``kafka``, ``s3``); ``apply`` and ``heal`` only talk to
the proxy's HTTP API, so they are quick and safe to call from any thread. What each
does to the connections, in toxiproxy's own terms:

* ``Drop``: a ``reset_peer`` toxic (timeout 0) on both directions: every connection
  that carries a byte while it is in place is reset (RST), new ones included; idle
  ones survive, as they would a real reset storm. ``heal`` removes the toxics.
* ``Stall``: a ``timeout`` toxic (timeout 0) on both directions: connections stay
  open and every byte is dropped, so a client sees silence, not an error, for as
  long as the stall lasts; only its own timeouts can tell. ``heal`` removes the
  toxics, and toxiproxy closes the connections that were stalled (their streams
  lost bytes and cannot be resumed); new connections flow again.
* ``Down``: the proxy disabled: its connections closed and its port refusing new
  ones, as a stopped server. ``heal`` enables it again.
* ``Slow``: a ``latency`` toxic (``latency_ms`` ± ``jitter_ms``) downstream.

Kafka clients connect to the broker they find in the metadata, not the bootstrap
address, so the broker must advertise the proxy: ``Routes.create`` expects the
local broker to run with its proxied listener (``infra.local.kafka.ProxiedListener``,
the ports of ``PortBlock``), and ``kafka_listener(block)`` says which that is.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol
from urllib.parse import urlsplit, urlunsplit

from infra.local import kafka, toxiproxy
from infra.local.errors import ServiceError
from infra.local.layout import HOST, Layout
from infra.local.processes import alive, port_open, read_pid, spawn, terminate, wait_until

READY_TIMEOUT = 30.0
API_TIMEOUT = 10.0
MARKER = toxiproxy.BINARY  # on the server's command line; see processes.alive
DSN_VARIABLES = ("GAPLESS_RESOLVER_DSN", "GAPLESS_PRODUCT_DSN", "GAPLESS_CONTROL_DSN")
NOT_FOUND, CONFLICT = 404, 409


class ProxyError(ServiceError):
    """The fault proxy could not be started or did not do what it was asked;
    ``status`` is the API's HTTP answer, when it gave one."""

    code = "FAULT_PROXY_FAILED"

    def __init__(self, message: str, hint: str = "", status: int | None = None) -> None:
        super().__init__(message, hint)
        self.status = status


@dataclass(frozen=True)
class PortBlock:
    """Sixteen consecutive loopback ports from ``base``: the API at ``base``, the
    proxies at ``base + 1 …``, and the broker's proxied listener at ``base + 15``."""

    base: int

    @property
    def api(self) -> int:
        return self.base

    def proxy(self, index: int) -> int:
        assert 0 < index < 15, index
        return self.base + index

    @property
    def broker_listener(self) -> int:
        return self.base + 15


def kafka_listener(block: PortBlock) -> kafka.ProxiedListener:
    """The broker listener the Kafka proxy forwards to, advertised at the proxy."""
    return kafka.ProxiedListener(port=block.broker_listener, advertised_port=block.proxy(2))


class ToxiproxyServer:
    """A toxiproxy server this process started, and its HTTP API."""

    def __init__(self, port: int, pid: int) -> None:
        self.port = port
        self.pid = pid
        self.url = f"http://{HOST}:{port}"

    @classmethod
    def start(
        cls, layout: Layout, block: PortBlock, log: Path, echo: Callable[[str], None] = print
    ) -> ToxiproxyServer:
        """Build the server if needed, start it on ``block.api`` with no proxies and
        wait for its API. A server a crashed run left on the block is stopped first."""
        layout.ensure_dirs()
        binary = toxiproxy.ensure_binary(layout, echo)
        pid_file = layout.pid_file(f"toxiproxy-{block.api}")
        stale = read_pid(pid_file)
        if stale is not None:  # left by a run that died before it stopped its server
            terminate(stale, MARKER, grace=5)
        if port_open(HOST, block.api):
            raise ProxyError(
                f"toxiproxy: port {block.api} is taken", "stop what listens there or pick a block"
            )
        process = spawn(
            [str(binary), "-host", HOST, "-port", str(block.api)],
            log=log,
            pid_file=pid_file,
        )
        server = cls(block.api, process.pid)

        def answers() -> bool:
            if process.poll() is not None:
                raise ProxyError(f"toxiproxy exited during start-up; see {log}")
            try:
                server.call("GET", "/version")
            except ProxyError:
                return False
            return True

        if not wait_until(answers, timeout=READY_TIMEOUT, interval=0.2):
            terminate(process.pid, MARKER, grace=5)
            raise ProxyError(f"toxiproxy did not answer on {server.url}", f"see {log}")
        return server

    def stop(self) -> None:
        """SIGTERM the server (its proxies and connections go with it)."""
        terminate(self.pid, MARKER, grace=10)

    def alive(self) -> bool:
        return alive(self.pid, MARKER)

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """One API call; its JSON answer (None for an empty one)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=API_TIMEOUT) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip()
            message = f"toxiproxy {method} {path}: {exc.code} {detail}"
            raise ProxyError(message, status=exc.code) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ProxyError(f"toxiproxy {method} {path}: {exc}") from exc
        return json.loads(raw) if raw.strip() else None

    def proxy(self, name: str, listen_port: int, upstream: str) -> Proxy:
        """A new proxy ``name`` on ``HOST:listen_port`` forwarding to ``upstream``."""
        listen = f"{HOST}:{listen_port}"
        self.call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream})
        return Proxy(self, name, listen, upstream)


@dataclass(frozen=True)
class Proxy:
    server: ToxiproxyServer
    name: str
    listen: str
    upstream: str

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    def add_toxic(self, name: str, kind: str, stream: str, **attributes: int) -> None:
        """A toxic of toxiproxy's type ``kind`` on ``stream`` (``upstream``: to the
        server, ``downstream``: to the client), applied to every connection. One of
        that name already there is left as it is."""
        toxic = {"name": name, "type": kind, "stream": stream, "attributes": attributes}
        try:
            self.server.call("POST", f"/proxies/{self.name}/toxics", toxic)
        except ProxyError as exc:
            if exc.status != CONFLICT:
                raise

    def remove_toxic(self, name: str) -> None:
        """Remove toxic ``name``; one that is not there is no error."""
        try:
            self.server.call("DELETE", f"/proxies/{self.name}/toxics/{name}")
        except ProxyError as exc:
            if exc.status != NOT_FOUND:
                raise

    def toxics(self) -> list[str]:
        return [t["name"] for t in self.server.call("GET", f"/proxies/{self.name}/toxics")]

    def set_enabled(self, enabled: bool) -> None:
        self.server.call("POST", f"/proxies/{self.name}", {"enabled": enabled})

    def enabled(self) -> bool:
        return bool(self.server.call("GET", f"/proxies/{self.name}")["enabled"])


class Fault(Protocol):
    """One fault on one proxy, applied and healed by a scheduler."""

    kind: ClassVar[str]

    @property
    def target(self) -> str: ...

    def apply(self) -> None: ...

    def heal(self) -> None: ...


@dataclass(frozen=True)
class _BothWays:
    """A toxic of one type on both directions, named after the fault's kind."""

    proxy: Proxy
    kind: ClassVar[str] = ""
    toxic: ClassVar[str] = ""

    @property
    def target(self) -> str:
        return self.proxy.name

    def _attributes(self) -> dict[str, int]:
        return {"timeout": 0}

    def apply(self) -> None:
        for stream in ("upstream", "downstream"):
            self.proxy.add_toxic(f"{self.kind}-{stream}", self.toxic, stream, **self._attributes())

    def heal(self) -> None:
        for stream in ("upstream", "downstream"):
            self.proxy.remove_toxic(f"{self.kind}-{stream}")


@dataclass(frozen=True)
class Drop(_BothWays):
    """Reset every connection that carries data (``reset_peer``)."""

    kind: ClassVar[str] = "drop"
    toxic: ClassVar[str] = "reset_peer"


@dataclass(frozen=True)
class Stall(_BothWays):
    """Silence: connections open, every byte dropped (``timeout`` 0); healing closes
    the stalled connections."""

    kind: ClassVar[str] = "stall"
    toxic: ClassVar[str] = "timeout"


@dataclass(frozen=True)
class Down:
    """The proxy disabled: connections closed, new ones refused."""

    proxy: Proxy
    kind: ClassVar[str] = "down"

    @property
    def target(self) -> str:
        return self.proxy.name

    def apply(self) -> None:
        self.proxy.set_enabled(False)

    def heal(self) -> None:
        self.proxy.set_enabled(True)


@dataclass(frozen=True)
class Slow:
    """Every answer delayed by ``latency_ms`` ± ``jitter_ms`` (``latency``)."""

    proxy: Proxy
    latency_ms: int = 500
    jitter_ms: int = 100
    kind: ClassVar[str] = "slow"

    @property
    def target(self) -> str:
        return self.proxy.name

    def apply(self) -> None:
        self.proxy.add_toxic(
            "slow", "latency", "downstream", latency=self.latency_ms, jitter=self.jitter_ms
        )

    def heal(self) -> None:
        self.proxy.remove_toxic("slow")


def through(dsn: str, proxy: Proxy) -> str:
    """``dsn`` (a postgresql:// URL) with its host and port replaced by the proxy's."""
    url = urlsplit(dsn)
    user, at, _ = url.netloc.rpartition("@")
    return urlunsplit(url._replace(netloc=f"{user}{at}{proxy.listen}"))


@dataclass(frozen=True)
class Routes:
    """A proxy in front of each local service: ``pg``, ``kafka``, ``s3``; no ``kafka``
    in front of a cluster (its clients reach each node at the address the node
    advertises; a cluster's faults are its nodes' deaths)."""

    pg: Proxy
    kafka: Proxy | None
    s3: Proxy

    @classmethod
    def create(cls, server: ToxiproxyServer, layout: Layout, block: PortBlock) -> Routes:
        """The proxies. A single broker must run with ``kafka_listener(block)``."""
        broker: Proxy | None = None
        if layout.kafka_brokers == 1:
            listener = kafka_listener(block)
            if kafka.proxied_listener(layout) != listener:
                raise ProxyError(
                    "kafka: the broker does not run with the proxied listener"
                    f" on {listener.port} advertised at {listener.advertised_port}",
                    "restart it with infra.local.kafka.start(layout, echo, proxied=...)",
                )
            broker = server.proxy("kafka", listener.advertised_port, f"{HOST}:{listener.port}")
        return cls(
            pg=server.proxy("pg", block.proxy(1), f"{HOST}:{layout.pg_port}"),
            kafka=broker,
            s3=server.proxy("s3", block.proxy(3), f"{HOST}:{layout.s3_port}"),
        )

    def all(self) -> tuple[Proxy, ...]:
        return tuple(p for p in (self.pg, self.kafka, self.s3) if p is not None)

    def heal_all(self) -> None:
        """Every toxic removed and every proxy enabled, whoever applied them."""
        for proxy in self.all():
            for name in proxy.toxics():
                proxy.remove_toxic(name)
            if not proxy.enabled():
                proxy.set_enabled(True)

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with the processes' DSNs, Kafka bootstrap (a single broker's) and S3
        endpoint routed through the proxies (the migration DSN, for set-up only, is
        left direct)."""
        routed = dict(env)
        for name in DSN_VARIABLES:
            if name in routed:
                routed[name] = through(routed[name], self.pg)
        if self.kafka is not None:
            routed["GAPLESS_KAFKA_BOOTSTRAP"] = self.kafka.listen
        routed["GAPLESS_S3_ENDPOINT"] = f"http://{self.s3.listen}"
        return routed


FAULTS: dict[str, Callable[[Proxy], Fault]] = {
    "drop": Drop,
    "stall": Stall,
    "down": Down,
    "slow": Slow,
}
"""Each fault kind and how to make one on a proxy (``FAULTS[kind](routes.pg)``)."""


def ensure_proxied_broker(layout: Layout, block: PortBlock, echo: Callable[[str], None]) -> None:
    """Restart the local broker with ``kafka_listener(block)`` unless it runs with it
    already (its PLAINTEXT listener, data and topics stay as they are)."""
    listener = kafka_listener(block)
    if kafka.proxied_listener(layout) != listener:
        kafka.stop(layout, echo)
        kafka.start(layout, echo, proxied=listener)


@contextlib.contextmanager
def proxied(
    layout: Layout, echo: Callable[[str], None], block: PortBlock | None = None
) -> Iterator[Routes]:
    """The three proxies for the duration of the block: the broker given its proxied
    listener if needed, a server started on ``block`` (default: the layout's
    ``proxy_port``) and stopped at the end, whatever happened."""
    block = block or PortBlock(layout.proxy_port)
    ensure_proxied_broker(layout, block, echo)
    log = layout.log_file(f"toxiproxy-{block.api}")
    server = ToxiproxyServer.start(layout, block, log, echo)
    try:
        yield Routes.create(server, layout, block)
    finally:
        server.stop()
