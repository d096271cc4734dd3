"""What the drill runs in its sandbox: the deployed processes (resolver API, relay,
read API and the agents workers, one consumer group), each on ports of its own, and,
while the drill wants a load, the writers on its catalog."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from infra.bench.rebuild_deployed import process_env
from infra.bench.sandbox import Sandbox
from infra.demo.workload import run_workload
from infra.processes import Deployed, free_port
from schemas.ids import StreamId
from schemas.settings import KafkaSettings

CATALOG = "c1"
CONSUMER = "product-applier"
START_TIMEOUT_S = 90.0
POLL_S = 0.1


@dataclass
class Rig:
    """The drill's processes by name (``live``: in the order they start), the catalog's
    tenant and its stream at the first epoch, and the writers while they run."""

    box: Sandbox
    tenant: str
    old: StreamId
    api_port: int
    read_port: int
    token: str
    kafka: KafkaSettings
    processes: dict[str, Deployed]
    health: dict[str, str | None]
    workers: list[Deployed]
    writers: Writers | None = None

    @property
    def live(self) -> list[Deployed]:
        return list(self.processes.values())

    def start_writers(self, tag: str, pace_seconds: float) -> None:
        self.writers = Writers(self.box, self.tenant, tag, pace_seconds)

    def stop_writers(self) -> None:
        """Stop the writers, raising their failure if they had one (they are gone
        either way, so ``stop`` does not stop them again)."""
        writers, self.writers = self.writers, None
        assert writers is not None
        writers.stop()

    def stop(self) -> None:
        """The writers if they run, then every process, the last started first: the
        processes are stopped even when the writers' failure is raised."""
        writers, self.writers = self.writers, None
        try:
            if writers is not None:
                writers.stop()
        finally:
            for p in reversed(self.live):
                p.stop()


def build_rig(box: Sandbox, agents_workers: int) -> Rig:
    """The processes of the drill in ``box`` (none started yet), logging to files of
    their own under the local directory's logs."""
    tenant = box.tenant("restore")
    old = StreamId(tenant, CATALOG, 1)
    api_port, read_port = free_port(), free_port()
    web_ports = [free_port() for _ in range(agents_workers)]
    env = {
        **process_env(box, api_port, web_ports[0]),
        "GAPLESS_READ_API_PORT": str(read_port),
        "GAPLESS_PAUSE_POLL_SECONDS": "1",
        "GAPLESS_AGENTS_GAP_THRESHOLD_SECONDS": "2",
        "GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS": "1",
    }
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    health: dict[str, str | None] = {
        "resolver-api": f"http://127.0.0.1:{api_port}/readyz",
        "relay": None,
        "read-api": f"http://127.0.0.1:{read_port}/readyz",
    }
    processes = {
        name: Deployed(name, [name], env, logs / f"drill-{box.run_id}-{name}.log", url)
        for name, url in health.items()
    }
    workers: list[Deployed] = []
    for n, port in enumerate(web_ports, start=1):
        name = f"agents-{n}"
        url = f"http://127.0.0.1:{port}/readyz"
        health[name] = url
        worker_env = {**env, "GAPLESS_AGENTS_WEB_PORT": str(port)}
        workers.append(
            Deployed(name, ["agents"], worker_env, logs / f"drill-{box.run_id}-{name}.log", url)
        )
    processes.update({w.name: w for w in workers})
    token = os.environ.get("GAPLESS_RESOLVER_TOKEN", "")
    kafka = KafkaSettings(
        kafka_bootstrap=box.bootstrap,
        events_topic=box.topic("events"),
        control_topic=box.topic("control"),
        rebuild_status_topic=box.topic("status"),
    )
    return Rig(box, tenant, old, api_port, read_port, token, kafka, processes, health, workers)


def wait_for(
    what: str, ready: Callable[[], bool], processes: list[Deployed], timeout: float
) -> None:
    """Until ``ready``, for up to ``timeout`` seconds; raises if one of ``processes``
    that was started has exited meanwhile."""
    deadline = time.monotonic() + timeout
    while not ready():
        for p in processes:
            if p.pid:
                p.require_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL_S)


class Writers:
    """Decisions on the catalog from two threads until stopped (``run_workload``)."""

    def __init__(self, box: Sandbox, tenant: str, tag: str, pace_seconds: float) -> None:
        self._pool = ConnectionPool(box.databases.resolver_dsn, min_size=1, max_size=2, open=True)
        self._epochs = EpochSource(box.databases.control_dsn)
        self._stop = threading.Event()
        self.error: BaseException | None = None

        def run() -> None:
            try:
                run_workload(
                    self._pool,
                    self._epochs,
                    [(tenant, CATALOG)],
                    1_000_000,
                    2,
                    stop=self._stop,
                    pace_seconds=pace_seconds,
                    id_tag=tag,
                )
            except BaseException as exc:  # reported by stop()
                self.error = exc

        self._thread = threading.Thread(target=run, name=f"drill-writers-{tag}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._pool.close()
        self._epochs.close()
        if self.error is not None:
            raise RuntimeError(f"the drill's writers failed: {self.error!r}") from self.error
