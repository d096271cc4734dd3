"""Start, stop and report the local services as one unit.

Each launcher is idempotent on its own, so a second `up` leaves running services
alone and only re-checks readiness, databases and buckets. `down` stops only
what gapless started (recorded in `.local/pids/`), in reverse order.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from types import ModuleType

from infra.local import collector_keys, kafka, kafka_nodes, postgres, postgres_ha, registry, s3
from infra.local.api_token import dev_token, dev_token_grant
from infra.local.errors import ServiceError
from infra.local.layout import Layout, current_layout
from infra.local.status import ServiceStatus

Echo = Callable[[str], None]


@contextlib.contextmanager
def _exclusive(layout: Layout) -> Iterator[None]:
    """Hold `.local/lock` for the duration of an `up` or `down`.

    Serializes whole `up`/`down` runs across processes (a developer's terminal
    and a test session, say), so two runs never both see a service as stopped
    and start it twice, or format Kafka storage concurrently. The lock is an
    flock, so the kernel releases it if the holder dies.
    """
    layout.ensure_dirs()
    with (layout.local / "lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ha(layout: Layout) -> bool:
    return layout.pg_standby != "none"


def _postgres(layout: Layout) -> ModuleType:
    """The one server, or a primary and a standby under pg_auto_failover."""
    return postgres_ha if _ha(layout) else postgres


def up(echo: Echo) -> None:
    """Start PostgreSQL, Kafka, versitygw and the schema registry unless running; wait
    until each is ready.

    Raises ServiceError (with a hint) when a prerequisite is missing, a port is
    taken (``PortTaken``, naming the holder and the variable that moves the port:
    every port is checked before anything starts), or a service does not become
    ready in time.
    """
    layout = current_layout()
    pg = _postgres(layout)
    with _exclusive(layout):
        for launcher in (pg, kafka, s3, registry):
            launcher.check_ports(layout)
        pg.start(layout, echo)
        kafka.start(layout, echo)
        s3.start(layout, echo)
        registry.start(layout, echo)


def down(echo: Echo) -> None:
    """Stop the services gapless started, in reverse order.

    Every service is attempted even if an earlier one fails; the first failure is
    raised afterwards.
    """
    layout = current_layout()
    failures: list[ServiceError] = []
    with _exclusive(layout):
        for stop in (registry.stop, s3.stop, kafka.stop, postgres_ha.stop, postgres.stop):
            try:
                stop(layout, echo)
            except ServiceError as exc:
                echo(str(exc))
                failures.append(exc)
    if failures:
        raise failures[0]


def status() -> list[ServiceStatus]:
    """One ServiceStatus per service, in start order. Never starts anything."""
    layout = current_layout()
    pg = postgres_ha.status(layout) if _ha(layout) else [postgres.status(layout)]
    return [
        *pg,
        *kafka.status(layout),
        s3.status(layout),
        registry.status(layout),
    ]


def local_environment() -> dict[str, str]:
    """The GAPLESS_* variables that point the pipeline at these local services.

    Reading the S3 keys creates them on first use (so this matches what `up`
    will hand the gateway), and so does reading the collector dev key pair;
    nothing is started.
    """
    layout = current_layout()
    creds = s3.credentials(layout)
    token = dev_token(layout)
    pg = _postgres(layout)
    api_port = os.environ.get("GAPLESS_RESOLVER_API_PORT", "18080")
    return {
        "GAPLESS_RESOLVER_URL": f"http://127.0.0.1:{api_port}",
        "GAPLESS_RESOLVER_TOKEN": token,
        # The local dev token is admin on every tenant; deployments scope theirs.
        "GAPLESS_API_TOKENS": dev_token_grant(token),
        "GAPLESS_RESOLVER_DSN": pg.dsn(layout, "resolver", postgres.APP_LOGIN),
        "GAPLESS_RESOLVER_MIGRATION_DSN": pg.dsn(layout, "resolver"),
        "GAPLESS_PRODUCT_DSN": pg.dsn(layout, "product"),
        "GAPLESS_CONTROL_DSN": pg.dsn(layout, "control"),
        "GAPLESS_KAFKA_BOOTSTRAP": kafka.bootstrap(layout),
        # On a local cluster the topics gapless creates are replicated to every node.
        "GAPLESS_KAFKA_REPLICATION_FACTOR": str(kafka_nodes.replication_factor(layout)),
        # Events in the Confluent framing, through the registry `up` starts.
        "GAPLESS_SCHEMA_REGISTRY_URL": registry.url(layout),
        "GAPLESS_S3_ENDPOINT": s3.endpoint(layout),
        "GAPLESS_S3_ACCESS_KEY": creds.access_key,
        "GAPLESS_S3_SECRET_KEY": creds.secret_key,
        "GAPLESS_EVIDENCE_BUCKET": s3.EVIDENCE_BUCKET,
        "GAPLESS_EXPORTS_BUCKET": s3.EXPORTS_BUCKET,
        # Collectors: tokens signed with the local dev key (gapless collector-token).
        "GAPLESS_COLLECTOR_JWT_PUBLIC_KEY": collector_keys.public_key_pem(layout),
        "GAPLESS_COLLECTOR_JWT_ISSUER": collector_keys.ISSUER,
        "GAPLESS_COLLECTOR_JWT_AUDIENCE": collector_keys.AUDIENCE,
    }
