"""The rebuild bench's deployed processes: ``gapless resolver-api``, ``gapless relay``
and two ``gapless agents`` workers, as subprocesses pointed at a sandbox's databases,
topics and ports (step 3 of ``infra.bench.rebuild``), and what the bench waits for of
them: the live consumer's durable progress reaching a position, and the workers'
events consumers in one stable group. Nothing here starts a process; ``Deployed.start``
does, and ``Deployed.stop`` ends it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import psycopg
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from infra.bench.live_writer import LiveWriter
from infra.bench.pipeline import logs_dir
from infra.bench.rebuild_seed import EPOCH
from infra.bench.sandbox import Echo, Sandbox, deployed_env
from infra.bench.writer import CATALOG
from infra.processes import Deployed, free_port
from schemas.ids import StreamId

LIVE_CONSUMER = "product-applier"
"""The agents' default ``GAPLESS_AGENTS_CONSUMER``."""
WORKERS = ("agents-a", "agents-b")
STEP_INTERVAL_S = 1.0
"""The agents' default ``GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS``."""
CHUNK_RECORDS = 20_000
"""The resolver's default ``GAPLESS_EXPORT_CHUNK_RECORDS``; the bare COPY commits as
many rows per transaction."""
EVENTS_CONSUMERS = 2
"""The agents' default ``GAPLESS_AGENTS_EVENTS_CONSUMERS``: members per worker."""
START_TIMEOUT_S = 60.0
POLL_S = 0.1


def process_env(box: Sandbox, api_port: int, web_port: int) -> dict[str, str]:
    """The environment of every deployed process of a rebuild run: the sandbox's
    (``deployed_env``, with its events topic), plus the resolver API's and the agents'
    ports, the live consumer and the bench's rebuild pace."""
    return {
        **deployed_env(box, box.topic("events")),
        "GAPLESS_RESOLVER_API_PORT": str(api_port),
        "GAPLESS_RESOLVER_URL": f"http://127.0.0.1:{api_port}",
        "GAPLESS_AGENTS_WEB_PORT": str(web_port),
        "GAPLESS_AGENTS_APP_ID": box.consumer_group,
        "GAPLESS_AGENTS_CONSUMER": LIVE_CONSUMER,
        "GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS": str(STEP_INTERVAL_S),
        "GAPLESS_EXPORT_CHUNK_RECORDS": str(CHUNK_RECORDS),
    }


@dataclasses.dataclass
class DeployedRun:
    """The sandbox's deployed processes and what every step needs of the run."""

    box: Sandbox
    tenant: str
    items: int
    echo: Echo
    api: Deployed
    relay: Deployed
    workers: list[Deployed]
    writer: LiveWriter | None = None

    @property
    def stream(self) -> StreamId:
        return StreamId(self.tenant, CATALOG, EPOCH)

    @property
    def processes(self) -> list[Deployed]:
        return [self.api, self.relay, *self.workers]

    def alive(self) -> None:
        for p in self.processes:
            p.require_alive()
        if self.writer is not None:
            self.writer.require_running()


def deployed(box: Sandbox, echo: Echo, tenant: str, items: int) -> DeployedRun:
    """The run's processes, each on ports of its own and logging to
    ``<GAPLESS_LOCAL_DIR>/logs``, not yet started."""
    api_port = free_port()
    env = process_env(box, api_port, free_port())
    logs = logs_dir()

    def process(name: str, args: str, health: str | None, **extra: str) -> Deployed:
        log = logs / f"bench-{box.run_id}-{name}.log"
        return Deployed(name, [args], {**env, **extra}, log, health)

    workers = []
    for name in WORKERS:
        port = free_port()
        workers.append(
            process(
                name,
                "agents",
                f"http://127.0.0.1:{port}/readyz",
                GAPLESS_AGENTS_WEB_PORT=str(port),
                GAPLESS_AGENTS_EVENTS_CONSUMERS=str(EVENTS_CONSUMERS),
            )
        )
    api = process("resolver-api", "resolver-api", f"http://127.0.0.1:{api_port}/readyz")
    relay_port = free_port()
    relay = process(
        "relay",
        "relay",
        f"http://127.0.0.1:{relay_port}/readyz",
        GAPLESS_RELAY_HTTP_PORT=str(relay_port),
    )
    return DeployedRun(box, tenant, items, echo, api, relay, workers)


def live_progress(product_dsn: str, stream: StreamId) -> tuple[int, int]:
    """The live consumer's durable (position, generation) of the stream."""
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT position, generation FROM stream_progress WHERE consumer = %s"
            " AND tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
            (LIVE_CONSUMER, *stream),
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def wait_applied(
    run: DeployedRun, through: Callable[[], int], what: str, timeout: float = START_TIMEOUT_S
) -> int:
    """Until the live consumer's progress reaches ``through()``; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        for p in run.processes:
            p.require_alive()
        target = through()
        position, _ = live_progress(run.box.databases.product_dsn, run.stream)
        if position >= target:
            return position
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what}: the live agents' progress is {position}, not {target},"
                f" after {timeout:.0f}s"
            )
        time.sleep(POLL_S)


def wait_group_stable(run: DeployedRun, timeout: float = START_TIMEOUT_S) -> None:
    """Until the workers' events consumers form one stable group, all of them in it
    (a baseline measured across a rebalance would measure the rebalance)."""
    group = f"{run.box.consumer_group}.events"
    members = len(run.workers) * EVENTS_CONSUMERS
    admin = AdminClient({"bootstrap.servers": run.box.bootstrap})
    deadline = time.monotonic() + timeout
    seen = "not described"
    while time.monotonic() < deadline:
        run.alive()
        described = admin.describe_consumer_groups([group])[group].result(timeout=10)
        seen = f"{described.state.name} with {len(described.members)} members"
        if described.state == ConsumerGroupState.STABLE and len(described.members) == members:
            return
        time.sleep(0.5)
    raise RuntimeError(f"group {group} not stable with {members} members: {seen}")
