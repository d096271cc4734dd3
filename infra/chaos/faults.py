"""The campaign's faults behind one small interface: a ``kind``, a ``target``,
``apply()`` and ``heal()``; the network faults of ``infra.chaos.proxy`` (drop,
stall) have the same shape and plug in as they are.

``build`` turns a planned fault (``infra.chaos.schedule``) into one of these.
A kill's ``heal`` is empty: the fleet starts the process again at once in
``apply`` (the restart policy a container runtime applies), armed as planned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from infra.chaos import proxy, schedule
from infra.chaos.fleet import Fleet
from infra.chaos.proxy import Routes
from infra.chaos.schedule import Armed, Planned
from infra.chaos.services import Private

Echo = Callable[[str], None]


class Fault(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def target(self) -> str: ...

    def apply(self) -> None: ...

    def heal(self) -> None: ...


@dataclass
class Kill:
    fleet: Fleet
    target: str
    armed: Armed | None
    kind: str = schedule.KILL
    happened: bool = False
    """False when the process was not running (it had just died at a crash point)."""

    def apply(self) -> None:
        self.happened = self.fleet.kill(self.target, self.armed)

    def heal(self) -> None:
        pass


@dataclass
class PostgresRestart:
    services: Private
    immediate: bool
    down_s: float
    echo: Echo
    target: str = "postgres"

    @property
    def kind(self) -> str:
        return schedule.PG_IMMEDIATE if self.immediate else schedule.PG_FAST

    def apply(self) -> None:
        """Down and back: the cluster's own shutdown and start are one step here
        (``pg_ctl start`` waits for recovery); ``heal`` has nothing left to do."""
        self.services.restart_postgres(self.immediate, self.down_s, self.echo)

    def heal(self) -> None:
        pass


@dataclass
class BrokerKill:
    services: Private
    echo: Echo
    kind: str = schedule.BROKER_KILL
    target: str = "kafka"

    def apply(self) -> None:
        self.services.kill_broker(self.echo)

    def heal(self) -> None:
        self.services.start_broker(self.echo)


@dataclass
class LeaderKill:
    """The node leading most of the events topic's partitions SIGKILLed (a cluster),
    started again at ``heal``; which node it was is decided when it happens."""

    services: Private
    echo: Echo
    kind: str = schedule.LEADER_KILL
    target: str = "kafka"

    def apply(self) -> None:
        self.services.kill_leader(self.echo)

    def heal(self) -> None:
        self.services.start_broker(self.echo)


@dataclass
class ObjectStoreDown:
    services: Private
    echo: Echo
    kind: str = schedule.S3_DOWN
    target: str = "s3"

    def apply(self) -> None:
        self.services.stop_object_store(self.echo)

    def heal(self) -> None:
        self.services.start_object_store(self.echo)


@dataclass
class RegistryDown:
    """The schema registry stopped (SIGTERM) and started again after the hold: a
    restart when short, an outage when long (``schedule.REGISTRY_DOWN_S``)."""

    services: Private
    echo: Echo
    kind: str = schedule.REGISTRY_DOWN
    target: str = "registry"

    def apply(self) -> None:
        self.services.stop_registry(self.echo)

    def heal(self) -> None:
        self.services.start_registry(self.echo)


def build(planned: Planned, fleet: Fleet, services: Private, echo: Echo) -> Fault:
    """The fault ``planned`` names; a proxy fault on the private services' proxies."""
    if planned.kind == schedule.KILL:
        return Kill(fleet, planned.target, planned.armed)
    if planned.kind in (schedule.PG_FAST, schedule.PG_IMMEDIATE):
        immediate = planned.kind == schedule.PG_IMMEDIATE
        return PostgresRestart(services, immediate, planned.hold, echo)
    if planned.kind == schedule.BROKER_KILL:
        return BrokerKill(services, echo)
    if planned.kind == schedule.LEADER_KILL:
        return LeaderKill(services, echo)
    if planned.kind == schedule.S3_DOWN:
        return ObjectStoreDown(services, echo)
    if planned.kind in (schedule.REGISTRY_RESTART, schedule.REGISTRY_DOWN):
        return RegistryDown(services, echo, planned.kind)
    if planned.kind in schedule.PROXY_KINDS:
        return network_fault(planned.kind, planned.target, services.proxies)
    raise ValueError(f"no fault of kind {planned.kind!r}")


_SERVICE_PROXY = {"postgres": "pg", "kafka": "kafka", "s3": "s3"}


def network_fault(kind: str, target: str, proxies: Routes) -> Fault:
    """``proxy_drop`` / ``proxy_stall`` on the proxy in front of ``target``."""
    fault_class = {"proxy_drop": proxy.Drop, "proxy_stall": proxy.Stall}[kind]
    route = getattr(proxies, _SERVICE_PROXY[target])
    if route is None:
        raise ValueError(f"no proxy in front of {target} (a cluster has none)")
    fault: Fault = fault_class(route)
    return fault
