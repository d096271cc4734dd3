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
   ``gapless agents`` workers, as subprocesses pointed at the sandbox
   (``infra.bench.rebuild_deployed``), and the live writer at ``live_eps`` events/s
   through the real writer (``infra.bench.live_writer``); wait until the live agents
   apply it and both workers' consumers are in a stable group;
4. the live baseline: ``baseline_s`` seconds of the same writes with no rebuild;
5. publish a rebuild request on the sandbox's control topic (what ``gapless
   rebuild`` publishes) and follow the rebuild row to ``done``, sampling the
   resolver API's and the workers' peak RSS through export and load and the
   rebuild's own ETA (``infra.bench.rebuild_eta``) and the search documents its export's
   manifest counts (``infra.bench.rebuild_exports``);
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
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import psycopg

from db.product.rebuilds import RebuildRow
from db.resolver.retention import committed_position
from infra.bench.bare_copy import TABLES, BareCopy, bare_copy
from infra.bench.live_writer import LiveWriter
from infra.bench.machine import MachineLoad
from infra.bench.rebuild_check import StreamedComparison, compare_streamed
from infra.bench.rebuild_deployed import (
    CHUNK_RECORDS,
    LIVE_CONSUMER,
    POLL_S,
    START_TIMEOUT_S,
    STEP_INTERVAL_S,
    DeployedRun,
    deployed,
    live_progress,
    wait_applied,
    wait_group_stable,
)
from infra.bench.rebuild_eta import EtaSample
from infra.bench.rebuild_exports import Documents, delete_exports, export_write_s
from infra.bench.rebuild_follow import Peaks, follow
from infra.bench.rebuild_live import (
    LiveLatency,
    PhaseClock,
    SwapSeen,
    Window,
    measure,
    server_now,
)
from infra.bench.rebuild_report import Memory, RebuildFigures, render_rebuild_table
from infra.bench.rebuild_seed import MIX, seed
from infra.bench.rebuild_takeover import Killer, Takeover
from infra.bench.run import environment_of
from infra.bench.sandbox import Echo, Sandbox, sandbox
from infra.bench.writer import CATALOG
from infra.control import publish, rebuild_command
from schemas.control import ControlCommand

LIVE_EPS = 200.0
"""The live writer's default rate, events/s (decisions of three events)."""
BASELINE_S = 20.0
"""The default length of the live baseline, seconds."""
SETTLE_TIMEOUT_S = 180.0


def _request(tenant: str, reason: str) -> ControlCommand:
    return rebuild_command(tenant, CATALOG, "bench", reason)


def _publish(box: Sandbox, command: ControlCommand) -> None:
    """What ``gapless rebuild`` publishes, on the sandbox's control topic."""
    publish(box.bootstrap, command, box.topic("control"))


def _settle_and_check(run: DeployedRun, row: RebuildRow) -> StreamedComparison:
    """Step 6 (the writer stopped): every committed position applied, the rebuilt
    generation served, and equal to the accepted state in every projection."""
    dbs = run.box.databases

    def cursor() -> int:
        with psycopg.connect(dbs.resolver_dsn, autocommit=True) as conn:
            return committed_position(conn, run.stream)

    wait_applied(run, cursor, "after the rebuild", SETTLE_TIMEOUT_S)
    _, serving = live_progress(dbs.product_dsn, run.stream)
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


def _start(run: DeployedRun, position: int, live_eps: float) -> None:
    """Step 3."""
    for p in run.processes:
        p.start()
    run.echo(f"rebuild: started resolver-api, relay and {len(run.workers)} agents workers")
    for p in run.processes:
        p.wait_ready(START_TIMEOUT_S)
    run.writer = LiveWriter(run.box.databases, run.tenant, CATALOG, run.items, live_eps)
    run.writer.start()
    wait_applied(run, lambda: position + 1, "live writes")
    wait_group_stable(run)
    run.echo(f"rebuild: live writes applied; {live_eps:g} events/s go on")


def _baseline(run: DeployedRun, seconds: float) -> Window:
    """Step 4: the writer's window with no rebuild running."""
    start = server_now(run.box.databases.resolver_dsn)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run.alive()
        time.sleep(min(POLL_S * 5, max(0.0, deadline - time.monotonic())))
    return Window(start, server_now(run.box.databases.resolver_dsn))


@dataclasses.dataclass(frozen=True)
class _Followed:
    """Step 5's rebuild, followed to ``done``, and what its observers saw meanwhile."""

    row: RebuildRow
    rto_s: float
    window: Window
    live_events: int
    peaks: Peaks
    eta: EtaSample
    documents: Documents
    swapped: SwapSeen
    clock: PhaseClock


def _follow_rebuild(run: DeployedRun) -> _Followed:
    """Step 5: publish the request and follow the rebuild row to ``done``; the RTO is
    the bench's clock from publishing to seeing ``done``, the live window the server's
    clock from just before publishing."""
    assert run.writer is not None
    box = run.box
    command = _request(run.tenant, "gapless bench rebuild")
    peaks = Peaks(run.api, run.workers, run.echo)
    peaks.start()
    eta = EtaSample(datetime.now(UTC))
    documents = Documents(box)
    swapped = SwapSeen()
    clock = PhaseClock()
    events_before = run.writer.events
    window_start = server_now(box.databases.resolver_dsn)
    start = time.monotonic()
    _publish(box, command)
    row = follow(
        box,
        command.command_id,
        run.items,
        run.alive,
        run.echo,
        [
            peaks.observe,
            lambda r: eta.observe(r, datetime.now(UTC)),
            documents.observe,
            swapped.observe,
            clock.observe,
        ],
    )
    rto = time.monotonic() - start
    window = Window(window_start, server_now(box.databases.resolver_dsn))
    live_events = run.writer.events - events_before
    return _Followed(row, rto, window, live_events, peaks, eta, documents, swapped, clock)


@dataclasses.dataclass(frozen=True)
class _Checked:
    """Step 6's outcome for step 5's rebuild, and what is read once it is applied."""

    comparison: StreamedComparison
    memory: tuple[Memory, Memory]
    """(the API's, the agents workers' largest)."""
    rows: dict[str, int]
    live: LiveLatency
    baseline: LiveLatency


def _check_rebuild(run: DeployedRun, followed: _Followed, baseline: Window) -> _Checked:
    """Step 6: stop the writer, wait until everything committed is applied and check
    the served generation; then the peak memory, the generation's rows, and the commit
    → apply latencies of step 5's window and of step 4's."""
    assert run.writer is not None
    dbs = run.box.databases
    run.writer.stop()
    run.echo("rebuild: done; waiting for the live agents to apply every committed position")
    comparison = _settle_and_check(run, followed.row)
    memory = followed.peaks.memory()
    rows = _generation_rows(dbs.product_dsn, run.tenant, followed.row.generation or 0)
    live = measure(
        dbs.resolver_dsn,
        dbs.product_dsn,
        run.tenant,
        LIVE_CONSUMER,
        followed.window,
        followed.swapped.swap,
        followed.clock.entered,
    )
    base = measure(dbs.resolver_dsn, dbs.product_dsn, run.tenant, LIVE_CONSUMER, baseline)
    return _Checked(comparison, memory, rows, live, base)


def _takeover(run: DeployedRun, kill_phases: Sequence[str], live_eps: float) -> list[Takeover]:
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
    run = deployed(box, echo, tenant, items)
    try:
        _start(run, position, live_eps)
        echo(f"rebuild: {baseline_s:g} s of live writes with no rebuild (the baseline)")
        baseline = _baseline(run, baseline_s)
        followed = _follow_rebuild(run)
        checked = _check_rebuild(run, followed, baseline)
        takeovers = _takeover(run, kill_phases, live_eps) if kill_phases else []
    finally:
        if run.writer is not None:
            run.writer.close()
        for p in reversed(run.processes):
            p.stop()
    return _figures(run, copied, followed, checked, baseline, live_eps, takeovers)


def _figures(
    run: DeployedRun,
    copied: BareCopy,
    followed: _Followed,
    checked: _Checked,
    baseline: Window,
    live_eps: float,
    takeovers: list[Takeover],
) -> RebuildFigures:
    """The figures: the first rebuild row's own, the bench's clock and observers', and
    the bare COPY's, under the JSON names of ``RebuildFigures``."""
    row = followed.row
    api_memory, agents_memory = checked.memory
    assert row.export_position is not None and row.finished_at is not None
    return RebuildFigures(
        items=run.items,
        rows_loaded=row.rows_loaded,
        chunks=row.chunks_total,
        attempts=row.attempt,
        rto_s=followed.rto_s,
        phases_s=dict(row.timings),
        export_write_s=export_write_s(run.box, row),
        cutover_pause_ms=row.cutover_pause_ms or 0.0,
        catchup_events=(row.target_position or row.export_position) - row.export_position,
        live_events=followed.live_events,
        bare_copy_rows=copied.total_rows,
        bare_copy_s=copied.total_s,
        api=api_memory,
        agents=agents_memory,
        step_interval_s=STEP_INTERVAL_S,
        rows_checked=sum(checked.comparison.rows.values()),
        bare_copy_items_s=copied.items_s,
        bare_copy_item_rows=copied.item_rows,
        load_rows=row.rows_loaded + (followed.documents.count or 0),
        rows=sum(checked.rows.values()),
        rows_by_table=checked.rows,
        rows_checked_by=dict(checked.comparison.rows),
        live=checked.live,
        baseline=checked.baseline,
        baseline_s=baseline.seconds,
        live_eps_offered=live_eps,
        takeovers=tuple(takeovers),
        eta_error_pct=followed.eta.error_pct(row.finished_at),
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
            delete_exports(box.tenant("rebuild"), echo)
    environment.update(machine.finish())
    figures = dataclasses.replace(figures, environment=environment)
    if as_json:
        print(json.dumps(figures.as_dict()))
    else:
        print(render_rebuild_table(figures))
