"""``gapless bench rebuild``: the recovery time of a shadow rebuild, measured.

In a sandbox of its own (databases and topics, dropped afterwards):

1. seed a catalog of ``items`` accepted items set-based (``infra.bench.rebuild_seed``):
   the resolver's state at W, the serving generation and the live progress at W;
2. the baseline: a bare ``COPY`` of the same rows (each item's row and its search
   document) into empty tables of the same shape (``infra.bench.bare_copy``);
3. start the deployed processes, ``gapless resolver-api``, ``gapless relay`` and
   ``gapless agents``, as subprocesses pointed at the sandbox, and a modest live
   write load through the real writer (``infra.bench.live_writer``); wait until the
   live agents apply it;
4. publish a rebuild request on the sandbox's control topic (what ``gapless
   rebuild`` publishes) and follow the rebuild row to ``done``, sampling the
   resolver API's and the agents' peak RSS through export and load;
5. stop the writer, wait until the live consumer has applied every committed
   position, and compare the generation it now serves with the accepted state row by
   row (``infra.bench.rebuild_check``): a rebuild that is wrong fails the bench.

The phase figures are the rebuild row's own ``timings``; the RTO is the bench's
clock from publishing the request to seeing ``done``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import psycopg

from db import rebuilds
from db.exports import get_export
from db.rebuilds import RebuildRow
from db.retention import committed_position
from infra.bench.bare_copy import bare_copy
from infra.bench.live_writer import LiveWriter
from infra.bench.machine import MachineLoad
from infra.bench.memory import peak_rss_mb, reset_peak, rss_mb
from infra.bench.rebuild_check import compare_streamed
from infra.bench.rebuild_report import Memory, RebuildFigures, render_rebuild_table
from infra.bench.rebuild_seed import EPOCH, seed
from infra.bench.run import environment_of
from infra.bench.sandbox import Echo, Sandbox, sandbox
from infra.bench.writer import CATALOG
from infra.control import publish
from infra.processes import Deployed, free_port
from schemas.control import ControlCommand
from schemas.ids import StreamId

LIVE_DECISIONS_PER_S = 20.0
"""The live writer's rate: 60 events/s, a small fraction of what the pipeline takes."""
LIVE_CONSUMER = "product-applier"
"""The agents' default ``GAPLESS_AGENTS_CONSUMER``."""
STEP_INTERVAL_S = 1.0
"""The agents' default ``GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS``."""
CHUNK_RECORDS = 20_000
"""The resolver's default ``GAPLESS_EXPORT_CHUNK_RECORDS``; the bare COPY commits as
many rows per transaction."""
START_TIMEOUT_S = 60.0
POLL_S = 0.1
ECHO_EVERY_S = 2.0


def _rebuild_timeout(items: int) -> float:
    return 300.0 + items / 1000


def process_env(box: Sandbox, api_port: int, web_port: int) -> dict[str, str]:
    """The environment of every deployed process: this one's (local services, S3
    keys, tokens), pointed at the sandbox's databases, topics and ports."""
    dbs = box.databases
    return {
        **os.environ,
        "GAPLESS_RESOLVER_DSN": dbs.resolver_dsn,
        "GAPLESS_RESOLVER_MIGRATION_DSN": dbs.resolver_owner_dsn,
        "GAPLESS_PRODUCT_DSN": dbs.product_dsn,
        "GAPLESS_CONTROL_DSN": dbs.control_dsn,
        "GAPLESS_KAFKA_BOOTSTRAP": box.bootstrap,
        "GAPLESS_EVENTS_TOPIC": box.topic("events"),
        "GAPLESS_CONTROL_TOPIC": box.topic("control"),
        "GAPLESS_REBUILD_STATUS_TOPIC": box.topic("status"),
        "GAPLESS_RESOLVER_API_PORT": str(api_port),
        "GAPLESS_RESOLVER_URL": f"http://127.0.0.1:{api_port}",
        "GAPLESS_AGENTS_WEB_PORT": str(web_port),
        "GAPLESS_AGENTS_APP_ID": box.consumer_group,
        "GAPLESS_AGENTS_CONSUMER": LIVE_CONSUMER,
        "GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS": str(STEP_INTERVAL_S),
        "GAPLESS_EXPORT_CHUNK_RECORDS": str(CHUNK_RECORDS),
    }


def _live_progress(product_dsn: str, stream: StreamId) -> tuple[int, int]:
    """The live consumer's durable (position, generation) of the stream."""
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT position, generation FROM stream_progress WHERE consumer = %s"
            " AND tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
            (LIVE_CONSUMER, *stream),
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _wait_applied(
    box: Sandbox,
    stream: StreamId,
    through: Callable[[], int],
    what: str,
    processes: list[Deployed],
    timeout: float = START_TIMEOUT_S,
) -> int:
    """Until the live consumer's progress reaches ``through()``; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        for p in processes:
            p.require_alive()
        target = through()
        position, _ = _live_progress(box.databases.product_dsn, stream)
        if position >= target:
            return position
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what}: the live agents' progress is {position}, not {target},"
                f" after {timeout:.0f}s"
            )
        time.sleep(POLL_S)


def _publish(box: Sandbox, command: ControlCommand) -> None:
    """What ``gapless rebuild`` publishes, on the sandbox's control topic."""
    publish(box.bootstrap, command, box.topic("control"))


class _Follower:
    """The rebuild row as the bench sees it, polled; progress on stderr."""

    def __init__(self, box: Sandbox, rebuild_id: uuid.UUID, echo: Echo) -> None:
        self._box = box
        self._id = rebuild_id
        self._echo = echo
        self._phase: str | None = None
        self._echoed = 0.0

    def row(self, conn: psycopg.Connection) -> RebuildRow | None:
        row = rebuilds.get(conn, self._id)
        if row is None:
            return None
        now = time.monotonic()
        if row.phase != self._phase or now - self._echoed >= ECHO_EVERY_S:
            self._echo(
                f"rebuild: {row.phase:<12} attempt {row.attempt}"
                f"  exported {self._exported(row)}  loaded {row.chunks_loaded}/"
                f"{row.chunks_total} chunks ({row.rows_loaded:,} rows)"
                + (f"  {row.error_code}: {row.error_message}" if row.error_code else "")
            )
            self._phase, self._echoed = row.phase, now
        return row

    def _exported(self, row: RebuildRow) -> str:
        if row.export_id is None:
            return "-"
        with psycopg.connect(self._box.databases.resolver_dsn, autocommit=True) as conn:
            export = get_export(conn, row.export_id)
        return "-" if export is None else f"{export.records:,} rows ({export.status})"


def _follow(
    box: Sandbox,
    command: ControlCommand,
    items: int,
    api: Deployed,
    agents: Deployed,
    writer: LiveWriter,
    echo: Echo,
) -> tuple[RebuildRow, float, Memory, Memory]:
    """Publish the request and follow it to ``done``: (the row, the RTO, memory of
    the API and of the agents)."""
    before = (rss_mb(api.pid), rss_mb(agents.pid))
    for p in (api, agents):
        if not reset_peak(p.pid):
            echo(f"rebuild: could not reset {p.name}'s peak RSS; its peak counts from its start")
    start = time.monotonic()
    _publish(box, command)
    follower = _Follower(box, command.command_id, echo)
    deadline = start + _rebuild_timeout(items)
    peaks: tuple[float, float] | None = None
    with psycopg.connect(box.databases.product_dsn, autocommit=True) as conn:
        while True:
            row = follower.row(conn)
            now = time.monotonic()
            if row is not None and peaks is None and row.phase in ("catching_up", "cutting_over"):
                peaks = (peak_rss_mb(api.pid), peak_rss_mb(agents.pid))
            if row is not None and row.phase == "done":
                rto = now - start
                break
            if row is not None and row.phase in ("failed", "cancelled"):
                raise RuntimeError(
                    f"rebuild {row.rebuild_id} {row.phase}: {row.error_code}: {row.error_message}"
                )
            if now > deadline:
                raise RuntimeError(
                    f"rebuild {command.command_id} not done after {now - start:.0f}s"
                    f" (phase {row.phase if row else 'not recorded'})"
                )
            for p in (api, agents):
                p.require_alive()
            writer.require_running()
            time.sleep(POLL_S)
    if peaks is None:  # went through catching up between two polls
        peaks = (peak_rss_mb(api.pid), peak_rss_mb(agents.pid))
    api_memory = Memory(before[0], max(peaks[0], before[0]))
    agents_memory = Memory(before[1], max(peaks[1], before[1]))
    return row, rto, api_memory, agents_memory


def _export_write_s(box: Sandbox, row: RebuildRow) -> float:
    assert row.export_id is not None
    with psycopg.connect(box.databases.resolver_dsn, autocommit=True) as conn:
        export = get_export(conn, row.export_id)
    if export is None or export.ready_at is None:
        return 0.0
    return (export.ready_at - export.created_at).total_seconds()


def _delete_exports(tenant: str, echo: Echo) -> None:
    """The run's export objects in the shared exports bucket (best effort)."""
    from infra.config import load
    from producers.exports.settings import ExportSettings
    from producers.exports.store import ExportStore

    try:
        deleted = ExportStore.from_settings(load(ExportSettings)).delete_prefix(
            f"exports/{quote(tenant, safe='')}/"
        )
        echo(f"deleted {deleted} export objects")
    except Exception as exc:  # the figures stand; leftovers are the bench's own prefix
        echo(f"could not delete the run's export objects: {exc}")


def measure_rebuild(box: Sandbox, items: int, echo: Echo) -> RebuildFigures:
    """Steps 1-5 of the module docstring in ``box``."""
    tenant = box.tenant("rebuild")
    stream = StreamId(tenant, CATALOG, EPOCH)
    position = seed(box.databases, tenant, CATALOG, items, LIVE_CONSUMER, echo)
    copied = bare_copy(
        box.databases.product_dsn, tenant, CATALOG, items, position, CHUNK_RECORDS, echo
    )
    api_port, web_port = free_port(), free_port()
    env = process_env(box, api_port, web_port)
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    health = {
        "resolver-api": f"http://127.0.0.1:{api_port}/readyz",
        "relay": None,
        "agents": f"http://127.0.0.1:{web_port}/readyz",
    }
    api, relay, agents = (
        Deployed(name, [name], env, logs / f"bench-{box.run_id}-{name}.log", health[name])
        for name in ("resolver-api", "relay", "agents")
    )
    processes = [api, relay, agents]
    writer = LiveWriter(box.databases, tenant, CATALOG, items, LIVE_DECISIONS_PER_S)
    try:
        for p in processes:
            p.start()
        echo(f"rebuild: started resolver-api (:{api_port}), relay, agents (:{web_port})")
        api.wait_ready(START_TIMEOUT_S)
        agents.wait_ready(START_TIMEOUT_S)
        writer.start()
        _wait_applied(box, stream, lambda: position + 1, "live writes", processes)
        echo(f"rebuild: live writes applied; {LIVE_DECISIONS_PER_S:g} decisions/s go on")
        command = ControlCommand(
            command_id=uuid.uuid4(),
            kind="rebuild",
            tenant_id=tenant,
            catalog_id=CATALOG,
            requested_by="bench",
            reason="gapless bench rebuild",
            requested_at=datetime.now(UTC),
        )
        events_before = writer.events
        row, rto, api_memory, agents_memory = _follow(
            box, command, items, api, agents, writer, echo
        )
        live_events = writer.events - events_before
        writer.stop()
        echo("rebuild: done; waiting for the live agents to apply every committed position")

        def cursor() -> int:
            with psycopg.connect(box.databases.resolver_dsn, autocommit=True) as conn:
                return committed_position(conn, stream)

        _wait_applied(box, stream, cursor, "after the rebuild", processes)
        _, serving = _live_progress(box.databases.product_dsn, stream)
        if serving != row.generation:
            raise RuntimeError(
                f"the live consumer serves generation {serving}, not the rebuilt {row.generation}"
            )
        echo(f"rebuild: comparing generation {serving} with the accepted state, row by row")
        checked = compare_streamed(
            box.databases.resolver_dsn, box.databases.product_dsn, tenant, serving
        )
        if checked.difference_count:
            shown = "\n  ".join(str(d) for d in checked.differences[:20])
            raise RuntimeError(
                f"the rebuilt generation differs from the accepted state in"
                f" {checked.difference_count} rows:\n  {shown}"
            )
    finally:
        writer.close()
        for p in reversed(processes):
            p.stop()
    assert row.export_position is not None
    return RebuildFigures(
        items=items,
        rows_loaded=row.rows_loaded,
        chunks=row.chunks_total,
        attempts=row.attempt,
        rto_s=rto,
        phases_s=dict(row.timings),
        export_write_s=_export_write_s(box, row),
        cutover_pause_ms=row.cutover_pause_ms or 0.0,
        catchup_events=(row.target_position or row.export_position) - row.export_position,
        live_events=live_events,
        bare_copy_rows=items,
        bare_copy_s=copied.seconds,
        bare_copy_items_s=copied.items_s,
        api=api_memory,
        agents=agents_memory,
        step_interval_s=STEP_INTERVAL_S,
        rows_checked=sum(checked.rows.values()),
    )


def run_rebuild_bench(items: int, as_json: bool, echo: Echo) -> None:
    """Prepare the local services, run the rebuild phase in a sandbox, print the figures."""
    from infra.config import use_local_services
    from infra.provision import provision

    use_local_services()
    provision(echo)
    machine = MachineLoad()
    topics = {"events": 6, "control": 1, "status": 1}
    with sandbox(echo, extra_topics=topics) as box:
        try:
            environment = environment_of(box)
            figures = measure_rebuild(box, items, echo)
        finally:
            _delete_exports(box.tenant("rebuild"), echo)
    environment.update(machine.finish())
    figures = dataclasses.replace(figures, environment=environment)
    if as_json:
        print(json.dumps(figures.as_dict()))
    else:
        print(render_rebuild_table(figures))
