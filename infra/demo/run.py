"""``gapless demo``: the whole pipeline on real services, checked row by row.

1. start the local services (if needed), migrate, create topics;
2. start the resolver API, the relay, the product agents and the capture worker as
   separate processes;
3. collectors post product feeds over HTTP (``infra.demo.captures``: an operator binds
   each source, a reviewer approves GTIN identity generations, a repeated post gets
   its first receipt back); the worker turns them into rule decisions and is killed
   once midway (``kill -9``) and restarted;
4. write a concurrent workload of real domain decisions (``infra.demo.workload``: rules and
   reviewers creating, mapping, versioning, setting attribute values, splitting and
   retiring, with refusals and rollbacks), killing the relay and the agents once
   each midway (``kill -9``) and restarting them, so recovery is part of every run;
   at 45 % of the workload an operator asks, through the control topic, for a shadow
   rebuild of the first catalog, which goes on under the load (and through the
   agents' crash) to its cutover (``infra.demo.rebuild``);
5. wait until the rebuild is done, every capture job is settled and every stream's
   durable progress equals its committed cursor;
6. compare the projections (items, listing mappings, shipping policy versions,
   splits, attribute definitions and values), each catalog in the generation it is
   served from, with the resolver's accepted state row by row;
7. end with a restore drill on one stream of its own (``infra.drill.restore``: a
   ``pg_dump`` under load restored in place, the epoch fenced, the catalog rebuilt
   and resumed), unless ``--no-drill``;
8. print the summary (``infra.demo.summary``); the last line is ``demo: OK`` or
   ``demo: FAILED``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from infra.config import load, use_local_services
from infra.demo import captures as demo_captures
from infra.demo.projection_check import compare_serving
from infra.demo.rebuild import LIVE_CONSUMER, DemoRebuild
from infra.demo.summary import capture_summary, print_summary, summarize
from infra.demo.workload import WorkloadStats, run_workload, streams_for
from infra.processes import Deployed, Launch
from schemas.ids import StreamId

Echo = Callable[[str], None]

DEMO_FEEDS = 4
DEMO_PRODUCTS = 24
API_START_TIMEOUT_S = 120.0
"""How long the resolver API may take to answer at start (a busy machine is slow)."""


def run_demo(
    events: int,
    tenants: int,
    writers: int,
    keep_running: bool,
    as_json: bool,
    echo: Echo,
    chaos: bool = True,
    drill: Callable[[Echo], dict[str, Any]] | None = None,
    launch: Launch = Deployed,
) -> bool:
    """``drill``: step 7, run after the demo's processes stopped (``infra.drill``'s
    ``demo_drill``; the CLI passes it), its summary added to the demo's. ``launch``
    makes the demo's processes: on this host, or as containers of the image
    (``infra.image.containers.launcher``, as ``make image-test`` runs it)."""
    from infra.local.services import down, status, up
    from infra.provision import provision

    started_here = not all(s.running for s in status())
    echo("starting services…")
    up(echo)
    use_local_services()
    provision(echo)
    settings = load(DatabaseSettings)
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    processes = _Processes.of(launch, logs)
    run_id = f"demo{uuid.uuid4().hex[:6]}"
    streams = streams_for(run_id, tenants)
    echo(f"run {run_id}: {len(streams)} streams, {events} events, {writers} writers")
    processes.start()
    began = time.monotonic()
    try:
        run = _run(chaos, settings, run_id, streams, events, writers, processes, began, echo)
    finally:
        processes.stop()
        if started_here and not keep_running and drill is None:
            down(echo)
    summary = run.summary
    if drill is not None:
        try:
            summary["restore_drill"] = drill(echo)
        finally:
            if started_here and not keep_running:
                down(echo)
    summary["workload_events"] = run.stats.events
    checks = _checks(run, drill is not None)
    summary["failed_checks"] = [name for name, passed in checks.items() if not passed]
    ok = not summary["failed_checks"]
    print_summary(summary, run.mismatches, ok, as_json)
    return ok


@dataclass(frozen=True)
class _Processes:
    """The demo's processes (step 2), each logging to a file of its own."""

    api: Deployed
    relay: Deployed
    agents: Deployed
    worker: Deployed

    @classmethod
    def of(cls, launch: Launch, logs: Path) -> _Processes:
        def process(name: str, log: Path, **env: str) -> Deployed:
            """A demo process: the demo's environment, and ``env`` on top."""
            return launch(name, [name], {**os.environ, **env}, log)

        return cls(
            api=process("resolver-api", logs / "demo-resolver-api.log"),
            relay=process("relay", logs / "demo-relay.log"),
            agents=process(
                "agents", logs / "demo-agents.log", GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS="0.5"
            ),
            # A killed worker's job waits for its claim to expire; keep that short here.
            worker=process(
                "resolver-worker",
                logs / "demo-resolver-worker.log",
                GAPLESS_WORKER_CLAIM_SECONDS="5",
                GAPLESS_WORKER_SCAN_INTERVAL_SECONDS="1",
                GAPLESS_WORKER_ORPHANED_AFTER_SECONDS="10",
            ),
        )

    def start(self) -> None:
        self.api.start()
        self.relay.start()
        self.agents.start()
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()
        self.agents.stop()
        self.relay.stop()
        self.api.stop()


@dataclass
class _Run:
    """What steps 3-6 leave for the checks and the summary."""

    stats: WorkloadStats
    captures: demo_captures.CaptureStats
    caught_up: bool
    mismatches: list[str]
    summary: dict[str, Any]


def _run(
    chaos: bool,
    settings: DatabaseSettings,
    run_id: str,
    streams: list[tuple[str, str]],
    events: int,
    writers: int,
    processes: _Processes,
    began: float,
    echo: Echo,
) -> _Run:
    """Steps 3-6, the processes running."""
    _wait_for_api(processes.api)
    captures = _collect(chaos, settings, streams, processes.worker, echo)
    rebuild = DemoRebuild(settings, streams[0], echo)
    stats = _write(
        chaos, settings, streams, events, writers, processes.relay, processes.agents, echo, rebuild
    )
    echo("waiting for the rebuild to cut over…")
    rebuilt = rebuild.wait(timeout=max(180.0, events / 50))
    echo("waiting for the capture worker to settle every capture job…")
    settled = demo_captures.wait_settled(settings, run_id, captures.posted, timeout=120.0)
    echo("waiting for every stream's durable progress to reach its committed cursor…")
    caught_up = _wait_caught_up(settings, run_id, echo, timeout=max(120.0, events / 50))
    elapsed = time.monotonic() - began
    comparison = compare_serving(
        settings.resolver_dsn, settings.product_dsn, f"{run_id}-%", LIVE_CONSUMER
    )
    mismatches = [str(d) for d in comparison.differences]
    echo("waiting for the agents to report their progress to the resolver…")
    reported = _wait_reported(settings, run_id, timeout=30.0)
    summary = summarize(settings, run_id, stats, elapsed, caught_up, comparison)
    summary["rebuild"] = rebuild.summary(rebuilt, comparison)
    summary.update(capture_summary(settings, run_id, captures, settled))
    summary["progress_reported"] = reported
    summary["events_pruned"] = _prune(settings, run_id)
    return _Run(stats, captures, caught_up, mismatches, summary)


def _checks(run: _Run, drilled: bool) -> dict[str, bool]:
    """Step 8's verdict, check by check (``failed_checks`` names the ones that failed)."""
    summary, stats = run.summary, run.stats
    checks = {
        "caught_up": run.caught_up,
        "progress_reported": summary["progress_reported"],
        "rows_match": not run.mismatches,
        "nothing_quarantined": summary["quarantined"] == 0,
        "captures_done": summary["captures_settled"]
        and summary["capture_jobs"].get("done", 0) == run.captures.posted,
        "every_event_committed": summary["events_committed"]
        == stats.events + summary["capture_events"]
        > 0,
        "every_event_applied": summary["events_applied"]
        + summary["ignored_stale"]
        + summary["loaded_by_rebuild"]
        == summary["events_committed"],
        "rebuild_done": summary["rebuild"]["phase"] == "done",
        "rebuild_cutover": summary["rebuild"]["cutover_check"],
    }
    if drilled:
        checks["restore_drill"] = bool(summary["restore_drill"]["drill_ok"])
    return checks


def _write(
    chaos: bool,
    settings: DatabaseSettings,
    streams: list[tuple[str, str]],
    events: int,
    writers: int,
    relay: Deployed,
    agents: Deployed,
    echo: Echo,
    rebuild: DemoRebuild,
) -> WorkloadStats:
    pool = ConnectionPool(settings.resolver_dsn, min_size=writers, max_size=writers, open=True)
    epochs = EpochSource(settings.control_dsn)
    crashes = {"relay": events // 3, "agents": (2 * events) // 3} if chaos else {}
    rebuild_at = (45 * events) // 100
    last_echo = [0.0]
    crashing = threading.Lock()

    def due(done: int) -> list[str]:
        """The crashes ``done`` events call for, each handed to one writer only (every
        writer thread reports its progress)."""
        with crashing:
            names = [name for name, at in crashes.items() if done >= at]
            for name in names:
                del crashes[name]
        return names

    def progress(done: int) -> None:
        now = time.monotonic()
        if done >= rebuild_at and not rebuild.requested:
            rebuild.request()
        for name in due(done):
            process = relay if name == "relay" else agents
            echo(f"  crash: kill -9 {name} at {done} events, restarting it")
            process.kill()
            process.start()
        if now - last_echo[0] >= 1.0:
            last_echo[0] = now
            echo(f"  written {min(done, events)}/{events}")

    try:
        return run_workload(pool, epochs, streams, events, writers, progress=progress)
    finally:
        pool.close()
        epochs.close()


def _collect(
    chaos: bool,
    settings: DatabaseSettings,
    streams: list[tuple[str, str]],
    worker: Deployed,
    echo: Echo,
) -> demo_captures.CaptureStats:
    """Collectors post product feeds for each tenant's first catalog
    (``infra.demo.captures``), after an operator bound the source and a reviewer
    approved a GTIN identity generation per class; the worker is killed once midway."""
    import httpx

    from infra.local.collector_keys import mint
    from infra.local.layout import current_layout

    first: dict[str, str] = {}
    for tenant_id, catalog_id in streams:
        first.setdefault(tenant_id, catalog_id)
    tenants = sorted(first.items())
    echo(f"collectors: binding {len(tenants)} sources and approving identity generations…")
    demo_captures.register_collectors(settings, tenants)
    url = os.environ["GAPLESS_RESOLVER_URL"]
    token = os.environ["GAPLESS_RESOLVER_TOKEN"]
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
    ) as api:
        demo_captures.activate_identity(api, tenants)
    layout = current_layout()

    def crash(tenant_index: int) -> None:
        if chaos and tenant_index == 0:
            echo("  crash: kill -9 resolver-worker while it works, restarting it")
            worker.kill()
            worker.start()

    return demo_captures.post_feeds(
        url, lambda client: mint(layout, client), tenants, DEMO_FEEDS, DEMO_PRODUCTS, echo, crash
    )


def _wait_caught_up(settings: DatabaseSettings, run_id: str, echo: Echo, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    last = 0.0
    while time.monotonic() < deadline:
        cursors = _cursors(settings, run_id)
        progress = _progress(settings, run_id)
        behind = {s: c - progress.get(s, 0) for s, c in cursors.items() if progress.get(s, 0) < c}
        if not behind:
            return True
        if time.monotonic() - last >= 2:
            last = time.monotonic()
            echo(f"  {len(behind)} streams behind by {sum(behind.values())} positions")
        time.sleep(0.25)
    return False


def _wait_for_api(api: Deployed, timeout: float = API_START_TIMEOUT_S) -> None:
    """Until the resolver API answers ``/readyz``; the collectors and the agents'
    progress reports need it. Raises (with its log's tail) if it exits or never does."""
    import httpx

    url = os.environ["GAPLESS_RESOLVER_URL"] + "/readyz"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        api.require_alive()
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the resolver API did not answer {url} in {timeout:.0f}s\n{api.tail()}")


def _wait_reported(settings: DatabaseSettings, run_id: str, timeout: float) -> bool:
    """True once the resolver holds, for every demo stream, the agents' final progress."""
    from producers.retention.report import stream_report

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(settings.resolver_dsn) as conn:
            report = [r for r in stream_report(conn) if r.tenant_id.startswith(f"{run_id}-")]
        if report and all(
            any(c.reported_position == r.committed for c in r.consumers) for r in report
        ):
            return True
        time.sleep(0.5)
    return False


def _prune(settings: DatabaseSettings, run_id: str) -> int:
    """Prune the demo's streams with no age limit: everything every consumer applied
    and reported may go; the retained tail above that stays."""
    from producers.retention.pruner import RetentionPolicy, prune_stream

    policy = RetentionPolicy(age_seconds=0, batch_size=1000)
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        return sum(
            prune_stream(conn, StreamId(*stream), policy).deleted
            for stream in _cursors(settings, run_id)
        )


def _cursors(settings: DatabaseSettings, run_id: str) -> dict[tuple[str, str, int], int]:
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_cursor"
            " WHERE tenant_id LIKE %s",
            (f"{run_id}-%",),
        ).fetchall()
    return {(t, c, e): p for t, c, e, p in rows}


def _progress(settings: DatabaseSettings, run_id: str) -> dict[tuple[str, str, int], int]:
    with psycopg.connect(settings.product_dsn) as conn:
        rows = conn.execute(
            "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_progress"
            " WHERE tenant_id LIKE %s",
            (f"{run_id}-%",),
        ).fetchall()
    return {(t, c, e): p for t, c, e, p in rows}
