"""``gapless bench rebuild``: the recovery time of a shadow rebuild, measured, with
what it costs live traffic and how it survives the death of its worker.

In a sandbox of its own (databases and topics, dropped afterwards):

1. seed a catalog of ``items`` accepted items with their listing mappings, attribute
   values, splits and shipping policies, set-based (``infra.bench.rebuild_seed``
   states the mix): the resolver's state at W, the serving generation and the live
   progress at W;
2. the baseline: a bare ``COPY`` of the serving generation's rows, every kind, into
   empty tables of the same shapes (``infra.bench.bare_copy``);
3. start the deployed processes, ``gapless resolver-api``, ``gapless relay`` and two
   ``gapless agents`` workers, as subprocesses pointed at the sandbox, and the live
   writer at ``live_eps`` events/s through the real writer
   (``infra.bench.live_writer``); wait until the live agents apply it and both
   workers' consumers are in a stable group;
4. the live baseline: ``baseline_s`` seconds of the same writes with no rebuild;
5. publish a rebuild request on the sandbox's control topic (what ``gapless
   rebuild`` publishes) and follow the rebuild row to ``done``, sampling the
   resolver API's and the workers' peak RSS through export and load and the
   rebuild's own ETA (``infra.bench.rebuild_eta``);
6. stop the writer, wait until the live consumer has applied every committed
   position, and compare the generation it now serves with the accepted state row by
   row, every projection (``infra.bench.rebuild_check``): a rebuild that is wrong
   fails the bench. The commit → apply latencies of the live events of 4's and 5's
   windows are read then (``infra.bench.rebuild_live``);
7. with ``kill_phases``: under a new live writer, one more rebuild per phase, whose
   worker is killed (SIGKILL) in that phase and started again
   (``infra.bench.rebuild_takeover``), then 6's wait and check again for the last.

The phase figures are the first rebuild row's own ``timings``; the RTO is the
bench's clock from publishing its request to seeing ``done``. The processes are
stopped (SIGTERM) whatever happened, and the sandbox dropped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import psycopg
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from db.product.rebuilds import RebuildRow
from db.resolver.exports import get_export
from db.resolver.retention import committed_position
from infra.bench.bare_copy import TABLES, bare_copy
from infra.bench.live_writer import LiveWriter
from infra.bench.machine import MachineLoad
from infra.bench.rebuild_check import StreamedComparison, compare_streamed
from infra.bench.rebuild_eta import EtaSample
from infra.bench.rebuild_follow import Peaks, follow
from infra.bench.rebuild_live import Swap, Window, measure, server_now
from infra.bench.rebuild_report import RebuildFigures, render_rebuild_table
from infra.bench.rebuild_seed import EPOCH, MIX, seed
from infra.bench.rebuild_takeover import Killer, Takeover
from infra.bench.run import environment_of
from infra.bench.sandbox import Echo, Sandbox, sandbox
from infra.bench.writer import CATALOG
from infra.control import publish, rebuild_command
from infra.processes import Deployed, free_port
from schemas.control import ControlCommand
from schemas.ids import StreamId

LIVE_EPS = 200.0
"""The live writer's default rate, events/s (decisions of three events)."""
BASELINE_S = 20.0
"""The default length of the live baseline, seconds."""
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
SETTLE_TIMEOUT_S = 180.0
POLL_S = 0.1


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


@dataclasses.dataclass
class _Run:
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


def _deployed(box: Sandbox, echo: Echo, tenant: str, items: int) -> _Run:
    api_port = free_port()
    env = process_env(box, api_port, free_port())
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    logs.mkdir(parents=True, exist_ok=True)

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
    return _Run(box, tenant, items, echo, api, relay, workers)


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
    run: _Run, through: Callable[[], int], what: str, timeout: float = START_TIMEOUT_S
) -> int:
    """Until the live consumer's progress reaches ``through()``; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        for p in run.processes:
            p.require_alive()
        target = through()
        position, _ = _live_progress(run.box.databases.product_dsn, run.stream)
        if position >= target:
            return position
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what}: the live agents' progress is {position}, not {target},"
                f" after {timeout:.0f}s"
            )
        time.sleep(POLL_S)


def _wait_group_stable(run: _Run, timeout: float = START_TIMEOUT_S) -> None:
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


def _request(tenant: str, reason: str) -> ControlCommand:
    return rebuild_command(tenant, CATALOG, "bench", reason)


def _publish(box: Sandbox, command: ControlCommand) -> None:
    """What ``gapless rebuild`` publishes, on the sandbox's control topic."""
    publish(box.bootstrap, command, box.topic("control"))


def _settle_and_check(run: _Run, row: RebuildRow) -> StreamedComparison:
    """Step 6 (the writer stopped): every committed position applied, the rebuilt
    generation served, and equal to the accepted state in every projection."""
    dbs = run.box.databases

    def cursor() -> int:
        with psycopg.connect(dbs.resolver_dsn, autocommit=True) as conn:
            return committed_position(conn, run.stream)

    _wait_applied(run, cursor, "after the rebuild", SETTLE_TIMEOUT_S)
    _, serving = _live_progress(dbs.product_dsn, run.stream)
    if serving != row.generation:
        raise RuntimeError(
            f"the live consumer serves generation {serving}, not the rebuilt {row.generation}"
        )
    run.echo(f"rebuild: comparing generation {serving} with the accepted state, row by row")
    checked = compare_streamed(dbs.resolver_dsn, dbs.product_dsn, run.tenant, serving)
    if checked.difference_count:
        shown = "\n  ".join(str(d) for d in checked.differences[:20])
        raise RuntimeError(
            f"the rebuilt generation differs from the accepted state in"
            f" {checked.difference_count} rows:\n  {shown}"
        )
    return checked


def _generation_rows(product_dsn: str, tenant: str, generation: int) -> dict[str, int]:
    """Rows of every projection table in ``generation`` of the catalog."""
    rows: dict[str, int] = {}
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        for t in TABLES:
            found = conn.execute(
                f"SELECT count(*) FROM {t.name} WHERE generation = %s AND tenant_id = %s"
                " AND catalog_id = %s",
                (generation, tenant, CATALOG),
            ).fetchone()
            rows[t.name] = int(found[0]) if found else 0
    return rows


class _Documents:
    """The search documents the load writes with its items: one per item record of the
    export, read from its manifest once the export is ready (its objects may be gone
    after the cleanup)."""

    def __init__(self, box: Sandbox) -> None:
        self._box = box
        self.count: int | None = None

    def observe(self, row: RebuildRow) -> None:
        if self.count is not None or row.export_id is None or row.phase in ("leased", "exporting"):
            return
        from infra.config import load
        from producers.exports.settings import ExportSettings
        from producers.exports.store import ExportStore
        from schemas.exports import Manifest

        with psycopg.connect(self._box.databases.resolver_dsn, autocommit=True) as conn:
            export = get_export(conn, row.export_id)
        if export is None or export.manifest_key is None or export.manifest_sha256 is None:
            return
        store = ExportStore.from_settings(load(ExportSettings))
        manifest = Manifest.from_bytes(store.get(export.manifest_key), export.manifest_sha256)
        self.count = manifest.by_aggregate.get("catalog_item", 0)


class _PhaseClock:
    """When the bench first saw the rebuild in each phase (its poll's resolution)."""

    def __init__(self) -> None:
        self.entered: list[tuple[str, datetime]] = []

    def observe(self, row: RebuildRow) -> None:
        if not self.entered or self.entered[-1][0] != row.phase:
            self.entered.append((row.phase, datetime.now(UTC)))


class _SwapSeen:
    """The swap as the rebuild row recorded it: H, and its ``updated_at`` in the swap's
    transaction (read before the rebuild moves on; once ``done`` is all there is, its
    time is a little later than the swap's)."""

    def __init__(self) -> None:
        self.swap: Swap | None = None

    def observe(self, row: RebuildRow) -> None:
        if self.swap is None and row.previous_generation is not None:
            assert row.target_position is not None
            self.swap = Swap(row.target_position, row.updated_at)


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


def _start(run: _Run, position: int, live_eps: float) -> None:
    """Step 3."""
    for p in run.processes:
        p.start()
    run.echo(f"rebuild: started resolver-api, relay and {len(run.workers)} agents workers")
    for p in run.processes:
        p.wait_ready(START_TIMEOUT_S)
    run.writer = LiveWriter(run.box.databases, run.tenant, CATALOG, run.items, live_eps)
    run.writer.start()
    _wait_applied(run, lambda: position + 1, "live writes")
    _wait_group_stable(run)
    run.echo(f"rebuild: live writes applied; {live_eps:g} events/s go on")


def _baseline(run: _Run, seconds: float) -> Window:
    """Step 4: the writer's window with no rebuild running."""
    start = server_now(run.box.databases.resolver_dsn)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run.alive()
        time.sleep(min(POLL_S * 5, max(0.0, deadline - time.monotonic())))
    return Window(start, server_now(run.box.databases.resolver_dsn))


def _takeover(run: _Run, kill_phases: Sequence[str], live_eps: float) -> list[Takeover]:
    """Step 7: one rebuild per phase killed in (a worker started again after a kill
    takes seconds to be ready, longer than the next phase may last), each requested
    once every worker answers ready; the last one's generation is checked."""
    run.writer = LiveWriter(
        run.box.databases, run.tenant, CATALOG, run.items, live_eps, prefix="takeover", seed=11
    )
    run.writer.start()
    takeovers: list[Takeover] = []
    row: RebuildRow | None = None
    for phase in kill_phases:
        for w in run.workers:
            w.wait_ready(START_TIMEOUT_S)
        command = _request(run.tenant, f"gapless bench rebuild: takeover in {phase}")
        killer = Killer(
            run.box.databases.product_dsn, command.command_id, [phase], run.workers, run.echo
        )
        _publish(run.box, command)
        row = follow(run.box, command.command_id, run.items, run.alive, run.echo, [killer.observe])
        takeovers += killer.takeovers
    for w in run.workers:
        w.wait_ready(START_TIMEOUT_S)
    run.writer.stop()
    assert row is not None
    _settle_and_check(run, row)
    return takeovers


def measure_rebuild(
    box: Sandbox,
    items: int,
    echo: Echo,
    live_eps: float = LIVE_EPS,
    baseline_s: float = BASELINE_S,
    kill_phases: Sequence[str] = (),
) -> RebuildFigures:
    """Steps 1-7 of the module docstring in ``box``."""
    tenant = box.tenant("rebuild")
    dbs = box.databases
    position = seed(dbs, tenant, CATALOG, items, LIVE_CONSUMER, echo)
    copied = bare_copy(dbs.product_dsn, tenant, CATALOG, 1, CHUNK_RECORDS, echo)
    run = _deployed(box, echo, tenant, items)
    try:
        _start(run, position, live_eps)
        assert run.writer is not None
        echo(f"rebuild: {baseline_s:g} s of live writes with no rebuild (the baseline)")
        baseline = _baseline(run, baseline_s)
        command = _request(tenant, "gapless bench rebuild")
        peaks = Peaks(run.api, run.workers, echo)
        peaks.start()
        eta = EtaSample(datetime.now(UTC))
        documents = _Documents(box)
        swapped = _SwapSeen()
        clock = _PhaseClock()
        events_before = run.writer.events
        window_start = server_now(dbs.resolver_dsn)
        start = time.monotonic()
        _publish(box, command)
        row = follow(
            box,
            command.command_id,
            items,
            run.alive,
            echo,
            [
                peaks.observe,
                lambda r: eta.observe(r, datetime.now(UTC)),
                documents.observe,
                swapped.observe,
                clock.observe,
            ],
        )
        rto = time.monotonic() - start
        window = Window(window_start, server_now(dbs.resolver_dsn))
        live_events = run.writer.events - events_before
        run.writer.stop()
        echo("rebuild: done; waiting for the live agents to apply every committed position")
        checked = _settle_and_check(run, row)
        api_memory, agents_memory = peaks.memory()
        rows = _generation_rows(dbs.product_dsn, tenant, row.generation or 0)
        live = measure(
            dbs.resolver_dsn,
            dbs.product_dsn,
            tenant,
            LIVE_CONSUMER,
            window,
            swapped.swap,
            clock.entered,
        )
        base = measure(dbs.resolver_dsn, dbs.product_dsn, tenant, LIVE_CONSUMER, baseline)
        takeovers = _takeover(run, kill_phases, live_eps) if kill_phases else []
    finally:
        if run.writer is not None:
            run.writer.close()
        for p in reversed(run.processes):
            p.stop()
    assert row.export_position is not None and row.finished_at is not None
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
        bare_copy_rows=copied.total_rows,
        bare_copy_s=copied.total_s,
        api=api_memory,
        agents=agents_memory,
        step_interval_s=STEP_INTERVAL_S,
        rows_checked=sum(checked.rows.values()),
        bare_copy_items_s=copied.items_s,
        bare_copy_item_rows=copied.item_rows,
        load_rows=row.rows_loaded + (documents.count or 0),
        rows=sum(rows.values()),
        rows_by_table=rows,
        rows_checked_by=dict(checked.rows),
        live=live,
        baseline=base,
        baseline_s=baseline.seconds,
        live_eps_offered=live_eps,
        takeovers=tuple(takeovers),
        eta_error_pct=eta.error_pct(row.finished_at),
        agents_workers=len(run.workers),
        mix=dict(MIX),
        load_s_by_kind={k: float(c.get("seconds", 0.0)) for k, c in row.load_cost.items()},
    )


def run_rebuild_bench(
    items: int,
    as_json: bool,
    echo: Echo,
    live_eps: float = LIVE_EPS,
    baseline_s: float = BASELINE_S,
    kill_phases: Sequence[str] = (),
) -> None:
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
            figures = measure_rebuild(box, items, echo, live_eps, baseline_s, kill_phases)
        finally:
            _delete_exports(box.tenant("rebuild"), echo)
    environment.update(machine.finish())
    figures = dataclasses.replace(figures, environment=environment)
    if as_json:
        print(json.dumps(figures.as_dict()))
    else:
        print(render_rebuild_table(figures))
