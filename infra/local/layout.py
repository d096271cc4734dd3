"""Where the local services keep their state, and which ports they listen on.

Everything lives under one directory, `.local/` next to `pyproject.toml` unless
`GAPLESS_LOCAL_DIR` points elsewhere, so `rm -rf .local` resets the machine.
Ports default to values unlikely to collide with a system-wide PostgreSQL or
Kafka and can be moved with `GAPLESS_LOCAL_*_PORT`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from infra.local.errors import ServiceError

HOST = "127.0.0.1"

# infra/local/layout.py -> infra/ ; the Kafka pom and log4j2 config ship beside it.
INFRA_DIR = Path(__file__).resolve().parent.parent


def _port(variable: str, default: int) -> int:
    raw = os.environ.get(variable)
    if raw is None or raw == "":
        return default
    try:
        port = int(raw)
    except ValueError:
        raise ServiceError(
            f"{variable}={raw!r} is not a port number", f"set {variable} to 1-65535"
        ) from None
    if not 0 < port < 65536:
        raise ServiceError(f"{variable}={port} is out of range", f"set {variable} to 1-65535")
    return port


KAFKA_BROKER_COUNTS = (1, 3)
"""What ``GAPLESS_LOCAL_KAFKA_BROKERS`` may be: one node, or a quorum of three that
survives one death (replication factor 3, two in-sync replicas)."""


def _brokers(variable: str) -> int:
    raw = os.environ.get(variable, "") or "1"
    if raw not in {str(n) for n in KAFKA_BROKER_COUNTS}:
        allowed = " or ".join(str(n) for n in KAFKA_BROKER_COUNTS)
        raise ServiceError(
            f"{variable}={raw!r} is not a broker count", f"set {variable} to {allowed}"
        )
    return int(raw)


PG_STANDBY_MODES = ("none", "sync", "async")


def _standby(variable: str) -> str:
    raw = os.environ.get(variable, "") or "none"
    if raw not in PG_STANDBY_MODES:
        raise ServiceError(
            f"{variable}={raw!r} is not a standby mode",
            f"set {variable} to {', '.join(PG_STANDBY_MODES)}",
        )
    return raw


def _repo_root() -> Path:
    """The nearest ancestor of this module that holds `pyproject.toml`."""
    for candidate in INFRA_DIR.parents:
        if (candidate / "pyproject.toml").is_file():
            return candidate
    raise ServiceError(
        f"no pyproject.toml above {INFRA_DIR}; cannot place the local state directory",
        "set GAPLESS_LOCAL_DIR to a directory for local service data",
    )


@dataclass(frozen=True)
class Layout:
    """Paths and ports shared by the launchers."""

    local: Path
    pg_port: int
    kafka_port: int
    kafka_controller_port: int
    s3_port: int
    registry_port: int = 18081
    registry_management_port: int = 18091
    proxy_port: int = 18470
    """The first of sixteen ports a TCP fault proxy takes when a test starts one
    (``infra.chaos.proxy.PortBlock``); nothing listens there otherwise."""
    jaeger_otlp_port: int = 14318
    """Jaeger's OTLP/HTTP receiver (``infra.local.jaeger``), when a test starts it."""
    jaeger_query_port: int = 16686
    """Jaeger's query API and UI over HTTP."""
    jaeger_query_grpc_port: int = 16685
    """Jaeger's query API over gRPC."""
    jaeger_health_port: int = 13133
    """Jaeger's health endpoint (``/status``)."""
    jaeger_metrics_port: int = 18888
    """Jaeger's own Prometheus metrics."""
    registry_database: str = "registry"
    """The database of the local PostgreSQL that keeps the schema registry's data."""
    kafka_brokers: int = 1
    """1: one KRaft node; 3: a cluster of three (``infra.local.kafka``)."""
    pg_standby: str = "none"
    """``none``: one PostgreSQL server. ``sync`` / ``async``: a primary and a standby
    replicating to it synchronously or not, under pg_auto_failover
    (``infra.local.postgres_ha``)."""
    kafka_port_stride: int = 2
    """Node *i* of a cluster listens on ``kafka_port + stride * (i - 1)`` and its
    controller on ``kafka_controller_port + stride * (i - 1)``."""

    @property
    def logs(self) -> Path:
        return self.local / "logs"

    @property
    def pids(self) -> Path:
        return self.local / "pids"

    @property
    def bin(self) -> Path:
        return self.local / "bin"

    def pid_file(self, service: str) -> Path:
        return self.pids / f"{service}.pid"

    def log_file(self, service: str) -> Path:
        return self.logs / f"{service}.log"

    def ensure_dirs(self) -> None:
        for directory in (self.local, self.logs, self.pids, self.bin):
            directory.mkdir(parents=True, exist_ok=True)


def current_layout() -> Layout:
    """The layout for this process, read from the environment each call."""
    override = os.environ.get("GAPLESS_LOCAL_DIR")
    local = Path(override).expanduser().resolve() if override else _repo_root() / ".local"
    return Layout(
        local=local,
        pg_port=_port("GAPLESS_LOCAL_PG_PORT", 15432),
        kafka_port=_port("GAPLESS_LOCAL_KAFKA_PORT", 19092),
        kafka_controller_port=_port("GAPLESS_LOCAL_KAFKA_CONTROLLER_PORT", 19093),
        s3_port=_port("GAPLESS_LOCAL_S3_PORT", 19000),
        registry_port=_port("GAPLESS_LOCAL_REGISTRY_PORT", 18081),
        registry_management_port=_port("GAPLESS_LOCAL_REGISTRY_MANAGEMENT_PORT", 18091),
        proxy_port=_port("GAPLESS_LOCAL_PROXY_PORT", 18470),
        jaeger_otlp_port=_port("GAPLESS_LOCAL_JAEGER_OTLP_PORT", 14318),
        jaeger_query_port=_port("GAPLESS_LOCAL_JAEGER_QUERY_PORT", 16686),
        jaeger_query_grpc_port=_port("GAPLESS_LOCAL_JAEGER_QUERY_GRPC_PORT", 16685),
        jaeger_health_port=_port("GAPLESS_LOCAL_JAEGER_HEALTH_PORT", 13133),
        jaeger_metrics_port=_port("GAPLESS_LOCAL_JAEGER_METRICS_PORT", 18888),
        kafka_brokers=_brokers("GAPLESS_LOCAL_KAFKA_BROKERS"),
        pg_standby=_standby("GAPLESS_LOCAL_PG_STANDBY"),
    )
