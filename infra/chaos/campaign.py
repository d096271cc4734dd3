"""``gapless chaos``: the deployed pipeline under faults, then checked from the stores.

1. start the campaign's own PostgreSQL, broker and S3 server
   (``infra.chaos.services``), migrate them and create the topics;
2. start the processes (``infra.chaos.fleet``): one relay, two agents workers, one
   capture worker and resolver API, or with ``scale`` two relays, three agents
   workers and two capture workers; every agents incarnation armed with the rebuild
   lane's crash points, once each in the campaign (``infra.chaos.lane``);
3. set up the workload (``infra.chaos.load``: items for the API deciders, the
   collectors' credentials, the poison) and start it, and the progress sampler;
4. run the plan (``infra.chaos.schedule``, from the seed) for ``seconds``: kills in
   one lane, service faults in another; ask for a shadow rebuild at 35 % of the
   time and fence the fence stream's epoch (``infra.fence``) at 55 %; processes that
   died at their armed crash point are started again, any other exit is recorded;
   then, until the rebuild and the fence are finished, the lane's kills go on, and
   the points nobody reached are closed;
5. stop the workload and wait for convergence (every process up, every stream
   published and applied to its cursor, every capture job settled, the rebuild and
   the fence done), up to a generous deadline;
6. read the stores and judge (``infra.chaos.check``), with the lane's figures (each
   rebuild point reached, two workers killed in one rebuild); count each instance's
   work;
7. stop the processes and remove the services, whatever failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from infra.chaos import check, faults, lane, schedule
from infra.chaos.assignment import held_partitions, waiting_events
from infra.chaos.crashpoints import REBUILD_POINTS, Ledger
from infra.chaos.fleet import Fleet
from infra.chaos.load import Load
from infra.chaos.sampler import Sampler
from infra.chaos.schedule import Options, Planned
from infra.chaos.services import Private, private_services

Echo = Callable[[str], None]

CONSUMER = "product-applier"
AGENTS_GROUP = "gapless-chaos-agents"
CONVERGE_TIMEOUT_S = 300.0
REBUILD_AT = 0.35
FENCE_AT = 0.55
SCRAPE_EVERY_S = 2.0
ECHO_EVERY_S = 5.0
KILL_DEADLINE_FACTOR = 3.0
"""Kills wait for their target to be up; those not done within this many times the
campaign's seconds are left out (``kills_undelivered``)."""
WORK_METRICS = {
    "relay": "gapless_relay_published_total",
    "agents": "gapless_applier_events_total",
    "resolver-worker": "gapless_worker_items_total",
}
"""What counts as one instance's work: events published, events applied (by outcome,
summed), capture products settled."""
CALM_S = 20.0
CALM_SETTLE_TIMEOUT_S = 120.0
CALM_SCRAPE_S = 30.0
"""How long the calm keeps asking a process for its counters at the window's start
and at its end (``CALM_SCRAPE_TIMEOUT_S`` an answer): an answer that timed out is no
figure, and taking the previous one for it would read as no work done."""
CALM_SCRAPE_TIMEOUT_S = 10.0
ASSIGNED_METRIC = "gapless_agents_assigned_partitions"
REPORTS_WAIT_S = 15.0
SATURATED = 50
"""An instance that did at least this much work while another of its kind did none
shows the work was not shared."""
EXPORT_CHUNK_RECORDS = 200
"""The resolver API's chunk size in the campaign: its rebuilds' exports come in
several chunks, so a load has a "between two chunks" for the lane to kill in."""
GAP_FILL = re.compile(
    r"stream \('([^']*)', '([^']*)', (\d+)\): filled from retained events after (\d+)"
)


@dataclass
class Settings:
    seed: int
    kills: int
    seconds: float
    scale: bool = False
    pg_restarts: int = 4
    broker_restarts: int = 3
    s3_outages: int = 2
    proxy_faults: int = 4


@dataclass
class Report:
    seed: int
    scale: bool
    faults: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    kills_undelivered: int = 0
    window_crashes: Counter[str] = field(default_factory=Counter)
    pg_restarts: int = 0
    broker_restarts: int = 0
    object_store_outages: int = 0
    proxy_faults: int = 0
    verdict: check.Verdict = field(default_factory=check.Verdict)
    converged_s: float | None = None
    work: dict[str, dict[str, float]] = field(default_factory=dict)
    calm_work: dict[str, dict[str, float]] = field(default_factory=dict)
    calm_idle_without_work: list[str] = field(default_factory=list)
    calm_disarmed: list[str] = field(default_factory=list)
    start_s: dict[str, dict[str, float]] = field(default_factory=dict)
    gap_fills: dict[str, int] = field(default_factory=dict)
    gap_fills_duplicated: int = 0
    reported_streams: dict[str, int] = field(default_factory=dict)
    reported_by_several: int = 0
    duplicated_work: list[str] = field(default_factory=list)
    workload: dict[str, Any] = field(default_factory=dict)
    samples: int = 0
    rebuild_lane: lane.Figures = field(default_factory=lane.Figures)

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.duplicated_work

    def as_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "seed": self.seed,
            "scale": self.scale,
            "ok": self.ok,
            "kills": self.kills,
            "kills_undelivered": self.kills_undelivered,
            "window_crashes": dict(sorted(self.window_crashes.items())),
            "pg_restarts": self.pg_restarts,
            "broker_restarts": self.broker_restarts,
            "object_store_outages": self.object_store_outages,
            "proxy_faults": self.proxy_faults,
            "faults": dict(sorted(self.faults.items())),
            "events_committed": v.events_committed,
            "lost": v.lost,
            "doubled": v.doubled,
            "mismatched_rows": v.mismatched_rows,
            "progress_regressions": v.progress_regressions,
            "stuck_jobs": v.stuck_jobs,
            "unexpected_quarantine": v.unexpected_quarantine,
            "converged_s": self.converged_s,
            "progress_samples": self.samples,
            "work_by_instance": self.work,
            "calm_work_by_instance": self.calm_work,
            "calm_idle_without_work": self.calm_idle_without_work,
            "calm_disarmed": self.calm_disarmed,
            "start_s": self.start_s,
            "gap_fills_by_instance": self.gap_fills,
            "gap_fills_duplicated": self.gap_fills_duplicated,
            "reported_streams_by_instance": self.reported_streams,
            "streams_reported_by_several": self.reported_by_several,
            "duplicated_work": self.duplicated_work,
            "workload": self.workload,
            "rebuild_kills_by_point": self.rebuild_lane.by_point,
            "rebuild_kills_by_rebuild": self.rebuild_lane.by_rebuild,
            "rebuild_points_unreached": self.rebuild_lane.unreached,
            "rebuild_workers_killed_most": self.rebuild_lane.most_workers,
            "violations": v.violations,
        }

    def figure_line(self) -> str:
        v = self.verdict
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()))
        converged = f"{self.converged_s:.1f} s" if self.converged_s is not None else "never"
        return (
            f"chaos seed {self.seed}: {self.kills} kills ({sum(self.window_crashes.values())}"
            f" in narrow windows), faults {by_kind}; {v.events_committed} events:"
            f" lost {v.lost}, doubled {v.doubled}, mismatched rows {v.mismatched_rows},"
            f" progress regressions {v.progress_regressions}, stuck jobs {v.stuck_jobs};"
            f" rebuild points {len(self.rebuild_lane.by_point)} of"
            f" {len(self.rebuild_lane.by_point) + len(self.rebuild_lane.unreached)} killed in"
            f" (at most {self.rebuild_lane.most_workers} workers in one rebuild);"
            f" converged in {converged}"
        )


def run_campaign(settings: Settings, echo: Echo) -> Report:
    """Steps 1-7 above."""
    report = Report(settings.seed, settings.scale)
    run_id = f"chaos{uuid.uuid4().hex[:6]}"
    from infra.local.layout import current_layout

    logs = current_layout().logs  # the main local directory's: they outlive the run
    logs.mkdir(parents=True, exist_ok=True)
    with private_services(echo) as services:
        saved = dict(os.environ)
        try:
            _use(services)
            _campaign(settings, services, run_id, logs, report, echo)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return report


def _use(services: Private) -> None:
    """This process and its children on the private services only."""
    for name in [n for n in os.environ if n.startswith("GAPLESS_")]:
        if name not in ("GAPLESS_LOCAL_DIR",) and not name.startswith("GAPLESS_CHAOS_"):
            del os.environ[name]
    os.environ.update(services.environment())
    os.environ["GAPLESS_LOG_LEVEL"] = "INFO"


def _fleet(
    settings: Settings, services: Private, logs: Path, run_id: str, book: Ledger, echo: Echo
) -> Fleet:
    fleet = Fleet(echo, book)
    # Two agents workers at least: a rebuild whose worker dies goes on on another.
    counts = {"resolver-api": 1, "relay": 1, "agents": 2, "resolver-worker": 1, "sweep-jobs": 1}
    if settings.scale:
        counts.update(relay=2, agents=3, **{"resolver-worker": 2})
    api_port = services.process_port(0)
    api_url = f"http://127.0.0.1:{api_port}"
    base = {
        **os.environ,
        "GAPLESS_RESOLVER_URL": api_url,
        "GAPLESS_RESOLVER_API_PORT": str(api_port),
        # A job the API could not enqueue (broker away) is the sweeper's after this.
        "GAPLESS_JOB_SWEEP_AFTER_SECONDS": "5",
        "GAPLESS_EXPORT_CHUNK_RECORDS": str(EXPORT_CHUNK_RECORDS),
    }
    index = 1
    for kind, n in counts.items():
        for i in range(1, n + 1):
            name = f"{kind}-{i}"
            port = api_port if kind == "resolver-api" else services.process_port(index)
            if kind != "resolver-api":
                index += 1
            # Everything the processes reach goes through the fault proxy.
            env = services.proxies.environment({**base, **_process_env(kind, name, port)})
            if kind == "agents":
                env.update(lane.environment(book))
            fleet.add(name, [kind], env, logs / f"{run_id}-{name}.log", port)
    return fleet


def _process_env(kind: str, name: str, port: int) -> dict[str, str]:
    if kind == "relay":
        return {"GAPLESS_RELAY_HTTP_PORT": str(port)}
    if kind == "agents":
        return {
            "GAPLESS_AGENTS_WEB_PORT": str(port),
            "GAPLESS_AGENTS_APP_ID": AGENTS_GROUP,
            "GAPLESS_AGENTS_CONSUMER": CONSUMER,
            "GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS": "0.5",
            "GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS": "1",
            "GAPLESS_AGENTS_GAP_THRESHOLD_SECONDS": "3",
        }
    if kind == "resolver-worker":
        # A killed worker's job waits for its claim to expire; keep that short.
        return {
            "GAPLESS_WORKER_HTTP_PORT": str(port),
            "GAPLESS_WORKER_ID": name,
            "GAPLESS_WORKER_CLAIM_SECONDS": "5",
            "GAPLESS_WORKER_SCAN_INTERVAL_SECONDS": "1",
            "GAPLESS_WORKER_ORPHANED_AFTER_SECONDS": "10",
        }
    if kind == "sweep-jobs":
        return {"GAPLESS_SWEEP_HTTP_PORT": str(port), "GAPLESS_SWEEP_INTERVAL_SECONDS": "1"}
    return {}


def _campaign(
    settings: Settings, services: Private, run_id: str, logs: Path, report: Report, echo: Echo
) -> None:
    from db.settings import DatabaseSettings
    from infra.config import load as load_settings
    from infra.demo.rebuild import DemoRebuild
    from infra.local.collector_keys import mint
    from infra.provision import provision
    from schemas.settings import KafkaSettings

    provision(echo)
    databases = load_settings(DatabaseSettings)
    kafka = load_settings(KafkaSettings)
    echo(f"process logs: {logs}/{run_id}-*.log")
    book = lane.ledger(logs / f"{run_id}-crash-ledger")
    fleet = _fleet(settings, services, logs, run_id, book, echo)
    options = Options(
        seconds=settings.seconds,
        kills=settings.kills,
        processes=fleet.names(),
        pg_restarts=settings.pg_restarts,
        broker_restarts=settings.broker_restarts,
        s3_outages=settings.s3_outages,
        proxy_faults=settings.proxy_faults,
    )
    plan = schedule.plan(settings.seed, options)
    echo(
        f"run {run_id}, seed {settings.seed}: {len(fleet.members)} processes, plan "
        + ", ".join(f"{k} {n}" for k, n in sorted(schedule.counts(plan).items()))
    )
    api_url = f"http://127.0.0.1:{services.process_port(0)}"
    load = Load(
        databases,
        api_url,
        os.environ["GAPLESS_RESOLVER_TOKEN"],
        lambda client: mint(services.layout, client),
        run_id,
        echo,
    )
    sampler = Sampler(databases.resolver_dsn, databases.product_dsn, load.tenant_like)
    seen = check.Seen()
    try:
        echo("starting the processes…")
        fleet.start_all()
        load.set_up(kafka)
        rebuild = DemoRebuild(databases, load.domain_streams[0], echo)
        sampler.start()
        load.start()
        fence = _Fence(databases, kafka, load.fence_stream, echo)
        began = time.time()
        _run_plan(plan, settings, fleet, services, rebuild, fence, load, report, seen, echo)
        _settle_lane(book, fleet, rebuild, fence, report, seen, echo)
        if settings.scale:

            def waiting_for(name: str) -> int:
                try:
                    log = (logs / f"{run_id}-{name}.log").read_text(errors="replace")
                except OSError:
                    return 1  # cannot tell what it holds: its idleness stays a violation
                held = held_partitions(log.splitlines())
                topic = kafka.events_topic
                return waiting_events(kafka, databases.product_dsn, topic, CONSUMER, held)

            _calm(fleet, report, seen, echo, waiting_for)
        echo("faults over; stopping the workload…")
        load.stop()
        seen.workload_errors += load.errors
        stopped = time.monotonic()
        echo("waiting for convergence…")
        seen.converged = _converge(databases, load, fleet, fence, rebuild, report, seen, echo)
        report.converged_s = round(time.monotonic() - stopped, 1) if seen.converged else None
        seen.rebuild_phase = _rebuild_phase(rebuild)
        seen.fence_done = fence.done
        _lane_figures(databases.product_dsn, book, fleet, began, report, seen, echo)
        _count_work(fleet, report, logs, run_id)
        report.start_s = _start_times(fleet)
    finally:
        sampler.stop()
        fleet.stop_all()
    seen.regressions = [str(r) for r in sampler.monotone.regressions]
    report.samples = sampler.samples
    observed = check.observe(
        databases.resolver_dsn,
        databases.product_dsn,
        kafka,
        kafka.events_topic,
        CONSUMER,
        load.tenant_like,
        load.poison,
    )
    report.verdict = check.judge(observed, seen)
    report.workload = {
        "domain_events": load.workload.events,
        "domain_transactions": load.workload.transactions,
        "domain_interrupted": load.workload.interrupted,
        "api_decisions": load.api.decisions,
        "api_one_item": load.api.one_item,
        "api_multi_item": load.api.multi_item,
        "api_answers_lost": load.api.answer_lost,
        "api_retries": load.api.retries,
        "api_refused": dict(load.api.refused),
        "captures_posted": load.captures.posted,
        "poison_sent": len(load.poison),
        "undecodable_on_topic": observed.undecodable_on_topic,
        "rows_compared": observed.rows_compared,
    }
    if load.api.refused:
        report.verdict.violations.append(f"api: unexpected answers {dict(load.api.refused)}")
    if load.api.gave_up:
        report.verdict.violations.append(f"api: {load.api.gave_up} decisions never answered")


class _Fence:
    """The epoch fence of the fence stream, in a thread of its own, run again after
    any failure (the procedure is idempotent) until it is complete."""

    def __init__(self, databases: Any, kafka: Any, stream: tuple[str, str], echo: Echo) -> None:
        self._databases = databases
        self._kafka = kafka
        self.tenant, self.catalog = stream
        self._echo = echo
        self.done = False
        self.attempts = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fence", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from infra.fence import fence_epoch

        deadline = time.monotonic() + CONVERGE_TIMEOUT_S * 2
        while not self.done and time.monotonic() < deadline:
            self.attempts += 1
            try:
                report = fence_epoch(
                    self._databases,
                    self._kafka,
                    CONSUMER,
                    self.tenant,
                    self.catalog,
                    1,
                    "operator:chaos",
                    "the campaign's fence under faults",
                    lambda line: self._echo(f"  fence: {line}"),
                    follow=self._follow,
                    pause_timeout_s=30.0,
                )
            except Exception as exc:  # the procedure is idempotent: go again
                self._echo(
                    f"  fence: attempt {self.attempts} stopped ({type(exc).__name__}: {exc}); again"
                )
                time.sleep(2.0)
                continue
            resumed = report.resumed is not None or (
                report.paused is not None and report.paused.state == "resumed"
            )
            self.done = report.rebuild_phase == "done" and resumed
            if not self.done:
                time.sleep(2.0)

    def _follow(self, rebuild_id: uuid.UUID) -> str | None:
        from db.product import rebuilds

        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        phase: str | None = None
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):
                with psycopg.connect(self._databases.product_dsn, connect_timeout=3) as conn:
                    row = rebuilds.get(conn, rebuild_id)
                phase = row.phase if row is not None else None
                if phase in ("done", "failed", "cancelled"):
                    return phase
            time.sleep(0.5)
        return phase


def _run_plan(
    plan: list[Planned],
    settings: Settings,
    fleet: Fleet,
    services: Private,
    rebuild: Any,
    fence: _Fence,
    load: Load,
    report: Report,
    seen: check.Seen,
    echo: Echo,
) -> None:
    kills = [p for p in plan if p.kind == schedule.KILL]
    others = [p for p in plan if p.kind != schedule.KILL]
    began = time.monotonic()
    lane_errors: list[str] = []

    def service_lane() -> None:
        for planned in others:
            _sleep_until(began + planned.at)
            fault = faults.build(planned, fleet, services, echo)
            at = time.monotonic() - began
            echo(f"  {at:6.1f}s {planned.kind} {planned.target} ({planned.hold:.1f}s)")
            try:
                fault.apply()
                if not isinstance(fault, faults.PostgresRestart):  # it holds in apply
                    time.sleep(planned.hold)
                fault.heal()
            except Exception as exc:
                lane_errors.append(f"{planned.kind}: {type(exc).__name__}: {exc}")
                continue
            report.faults[planned.kind] += 1
            if planned.kind in (schedule.PG_FAST, schedule.PG_IMMEDIATE):
                report.pg_restarts += 1
            elif planned.kind == schedule.BROKER_KILL:
                report.broker_restarts += 1
            elif planned.kind == schedule.S3_DOWN:
                report.object_store_outages += 1
            else:
                report.proxy_faults += 1

    lane = threading.Thread(target=service_lane, name="service faults", daemon=True)
    lane.start()
    asked_rebuild = asked_fence = False
    asking: threading.Thread | None = None
    last_scrape = last_echo = 0.0
    pending = list(kills)
    while pending or lane.is_alive() or time.monotonic() - began < settings.seconds:
        now = time.monotonic()
        elapsed = now - began
        # A due kill waits until its target is up (``Fleet.killable``); the others
        # due meanwhile go first.
        readiness: dict[str, bool] = {}
        if pending and elapsed > KILL_DEADLINE_FACTOR * settings.seconds:
            # The machine restarts processes slower than the plan kills them: the rest
            # are left out, and said so (``kills_undelivered``).
            waiting = Counter(p.target for p in pending)
            echo(
                f"  {len(pending)} kills not delivered within {elapsed:.0f}s:"
                + ", ".join(f" {target} {n}" for target, n in sorted(waiting.items()))
            )
            report.kills_undelivered = len(pending)
            pending.clear()
        for planned in [p for p in pending if p.at <= elapsed]:
            if planned.target not in readiness:
                readiness[planned.target] = fleet.killable(planned.target)
            if not readiness[planned.target]:
                continue
            readiness[planned.target] = False  # restarted now: not up yet
            pending.remove(planned)
            kill = faults.Kill(fleet, planned.target, planned.armed)
            kill.apply()
            if kill.happened:
                report.kills += 1
                report.faults[schedule.KILL] += 1
        if not asked_rebuild and elapsed >= REBUILD_AT * settings.seconds:
            asked_rebuild = True
            asking = threading.Thread(
                target=_ask_rebuild, args=(rebuild, echo), name="rebuild request", daemon=True
            )
            asking.start()
        if not asked_fence and elapsed >= FENCE_AT * settings.seconds:
            asked_fence = True
            fence.start()
        _watch(fleet, report, seen, echo)
        if now - last_scrape >= SCRAPE_EVERY_S:
            last_scrape = now
            fleet.scrape(tuple(WORK_METRICS.values()))
        if now - last_echo >= ECHO_EVERY_S:
            last_echo = now
            echo(
                f"  {elapsed:6.1f}s kills {report.kills} (+{sum(report.window_crashes.values())}"
                f" in windows), service faults {_service_faults(report)},"
                f" events written {load.events_written}, api decisions {load.api.decisions}"
            )
        time.sleep(0.05)
    if not asked_rebuild:
        _ask_rebuild(rebuild, echo)
    elif asking is not None:
        asking.join()
    if not asked_fence:
        fence.start()
    seen.workload_errors += lane_errors


def _settle_lane(
    book: Ledger,
    fleet: Fleet,
    rebuild: Any,
    fence: _Fence,
    report: Report,
    seen: check.Seen,
    echo: Echo,
) -> None:
    """The lane's kills go on past the plan until the rebuild and the fence are
    finished (every point reached ends it sooner), the dead workers restarted; then
    the points nobody reached are closed (``infra.chaos.lane``)."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    last = 0.0
    while time.monotonic() < deadline:
        _watch(fleet, report, seen, echo)
        reached = [p for p, r in book.entries().items() if not r.closed]
        phase = _rebuild_phase(rebuild)
        if len(reached) >= len(REBUILD_POINTS) or (
            phase in ("done", "failed", "cancelled") and fence.done
        ):
            break
        if seen.exited_on_their_own:
            break  # a process is down for good: convergence fails anyway
        if time.monotonic() - last >= ECHO_EVERY_S:
            last = time.monotonic()
            echo(
                f"  rebuild lane: {len(reached)} of {len(REBUILD_POINTS)} points killed in;"
                f" rebuild {phase}, fence {'done' if fence.done else 'not done'}"
            )
        time.sleep(0.5)
    closed = lane.close(book)
    if closed:
        echo(f"  rebuild lane closed; never reached: {', '.join(closed)}")


def _lane_figures(
    product_dsn: str,
    book: Ledger,
    fleet: Fleet,
    began: float,
    report: Report,
    seen: check.Seen,
    echo: Echo,
) -> None:
    """The lane's figures from the ledger and the rebuild rows, and what the judge
    needs of them."""
    try:
        known = lane.rebuilds(product_dsn)
    except psycopg.Error as exc:
        echo(f"  rebuild rows unreadable ({exc}); the lane's kills are not attributed")
        known = {}
    report.rebuild_lane = lane.summarize(book.entries(), fleet.pids, known, began)
    seen.lane_workers = len(fleet.names("agents"))
    seen.lane_unreached = list(report.rebuild_lane.unreached)
    seen.lane_most_workers = report.rebuild_lane.most_workers


def _service_faults(report: Report) -> int:
    return (
        report.pg_restarts
        + report.broker_restarts
        + report.object_store_outages
        + (report.proxy_faults)
    )


def _sleep_until(instant: float) -> None:
    pause = instant - time.monotonic()
    if pause > 0:
        time.sleep(pause)


def _ask_rebuild(rebuild: Any, echo: Echo) -> None:
    """Publish the request (the broker may be down right now: again until it is sent)."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            rebuild.request()
            return
        except Exception as exc:
            echo(f"  rebuild request not sent yet ({type(exc).__name__}); again")
            rebuild.requested = False
            time.sleep(1.0)


def _watch(fleet: Fleet, report: Report, seen: check.Seen, echo: Echo) -> None:
    fleet.probe()
    for exit_ in fleet.watch():
        if exit_.how.startswith("crash_point:"):
            point = exit_.how.removeprefix("crash_point:")
            report.window_crashes[point] += 1
            report.kills += 1
            report.faults[f"window:{point}"] += 1
        else:
            message = f"{exit_.process} exited with status {exit_.code}; see its log"
            echo(f"  VIOLATION: {message}")
            seen.exited_on_their_own.append(message)


def _converge(
    databases: Any,
    load: Load,
    fleet: Fleet,
    fence: _Fence,
    rebuild: Any,
    report: Report,
    seen: check.Seen,
    echo: Echo,
) -> bool:
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    last = 0.0
    while time.monotonic() < deadline:
        _watch(fleet, report, seen, echo)
        try:
            behind = _behind(databases, load)
        except psycopg.Error as exc:
            behind = [f"database: {exc}"]
        phase = _rebuild_phase(rebuild)
        if phase != "done":
            behind.append(f"rebuild {phase}")
        if not fence.done:
            behind.append("fence")
        if not fleet.all_alive():
            if seen.exited_on_their_own:
                echo("  a process is down on its own: no convergence to wait for")
                return False
            behind.append("a process is down")
        if not behind:
            return True
        if time.monotonic() - last >= ECHO_EVERY_S:
            last = time.monotonic()
            echo(f"  not yet: {'; '.join(behind[:4])}")
        time.sleep(0.5)
    return False


def _behind(databases: Any, load: Load) -> list[str]:
    like = load.tenant_like
    with psycopg.connect(databases.resolver_dsn, autocommit=True, connect_timeout=3) as conn:
        unpublished = conn.execute(
            "SELECT count(*), coalesce(sum(c.position - coalesce(p.published_position, 0)), 0)"
            " FROM stream_cursor c LEFT JOIN stream_publication p USING"
            " (tenant_id, catalog_id, history_epoch)"
            " WHERE c.tenant_id LIKE %s AND c.fenced_at IS NULL"
            " AND c.position > coalesce(p.published_position, 0)",
            (like,),
        ).fetchone()
        cursors = {
            (t, c, int(e)): int(p)
            for t, c, e, p in conn.execute(
                "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_cursor"
                " WHERE tenant_id LIKE %s AND fenced_at IS NULL",
                (like,),
            ).fetchall()
        }
        unsettled = conn.execute(
            "SELECT count(*) FROM intake_job WHERE tenant_id LIKE %s"
            " AND status NOT IN ('done', 'failed', 'skipped')",
            (like,),
        ).fetchone()
    with psycopg.connect(databases.product_dsn, autocommit=True, connect_timeout=3) as conn:
        progress = {
            (t, c, int(e)): int(p)
            for t, c, e, p in conn.execute(
                "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_progress"
                " WHERE consumer = %s AND tenant_id LIKE %s",
                (CONSUMER, like),
            ).fetchall()
        }
    behind = []
    if unpublished and unpublished[0]:
        behind.append(f"{unpublished[0]} streams unpublished by {unpublished[1]}")
    lagging = {s: c - progress.get(s, 0) for s, c in cursors.items() if progress.get(s, 0) < c}
    if lagging:
        behind.append(f"{len(lagging)} streams unapplied by {sum(lagging.values())}")
    if unsettled and unsettled[0]:
        behind.append(f"{unsettled[0]} capture jobs unsettled")
    return behind


def _rebuild_phase(rebuild: Any) -> str | None:
    if rebuild.rebuild_id is None:
        return None
    try:
        row = rebuild._row()
    except psycopg.Error:
        return None
    return row.phase if row is not None else None


def _start_times(fleet: Fleet) -> dict[str, dict[str, float]]:
    """Per kind of process: restarts seen and their seconds to a first healthy answer."""
    found = {}
    for kind, times in sorted(fleet.start_times.items()):
        ordered = sorted(times)
        found[kind] = {
            "restarts": float(len(ordered)),
            "median": ordered[len(ordered) // 2],
            "max": ordered[-1],
        }
    return found


def _count_work(fleet: Fleet, report: Report, logs: Path, run_id: str) -> None:
    """Each instance's work, and the gap closer's and the progress reporter's work
    across agents workers: gap fills from each worker's log, the streams whose
    progress each worker reported from its /metrics (``gapless_reported_progress``)."""
    fleet.scrape(tuple(WORK_METRICS.values()))
    for kind, metric in WORK_METRICS.items():
        for n in fleet.names(kind):
            report.work[n] = {metric: fleet.work(n).get(metric, 0.0)}
    fills: dict[tuple[str, ...], set[str]] = {}
    for name in fleet.names("agents"):
        count = 0
        log = logs / f"{run_id}-{name}.log"
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            found = GAP_FILL.search(line.replace('\\"', '"'))
            if found:
                count += 1
                fills.setdefault(found.groups(), set()).add(name)
        report.gap_fills[name] = count
    # Only the holder of the recovery lease reports; one restarted moments ago may
    # not have yet: give the workers a few report intervals (one second here) until
    # one of them shows reported streams, then read what each shows.
    urls: dict[str, str] = {}
    for name in fleet.names("agents"):
        member = fleet.members[name]
        if member.metrics_url and member.process.alive():
            urls[name] = member.metrics_url
    deadline = time.monotonic() + REPORTS_WAIT_S
    while True:
        reported = {n: _label_sets(u, "gapless_reported_progress") for n, u in urls.items()}
        if any(reported.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    report.reported_streams = {n: len(streams) for n, streams in reported.items()}
    report.gap_fills_duplicated = sum(1 for holders in fills.values() if len(holders) > 1)
    everyone = Counter(s for streams in reported.values() for s in streams)
    report.reported_by_several = sum(1 for n in everyone.values() if n > 1)
    if report.gap_fills_duplicated:
        report.duplicated_work.append(
            f"gap closer: {report.gap_fills_duplicated} gaps filled by more than one agents worker"
        )
    if report.reported_by_several:
        report.duplicated_work.append(
            f"progress reporter: {report.reported_by_several} streams reported by more than one"
            " agents worker"
        )


def _calm(
    fleet: Fleet,
    report: Report,
    seen: check.Seen,
    echo: Echo,
    waiting_for: Callable[[str], int] | None = None,
) -> None:
    """Whether the work is shared, measured where it can be: under kills every few
    seconds an instance is often down or rejoining while the others carry its share,
    so after the faults, with the workload still on, wait until every process is up
    and every agents worker holds events partitions, then count each instance's work
    over ``CALM_S``. An instance that did none of its kind's work while another did
    ``SATURATED`` or more is a violation (``unshared``); for an agents worker, only if
    ``waiting_for`` it finds events waiting in its partitions at the end (an idle
    worker whose partitions got nothing is reported in ``calm_idle_without_work``:
    ``infra.chaos.assignment``). Each count needs an answer from the instance's
    /metrics at both ends of the window (asked again for up to ``CALM_SCRAPE_S``);
    one that never answered is ``unmeasured``, a violation of its own, and not
    compared.

    An incarnation still armed at the faults' end would die at its crash point in the
    calm (an agents worker at its first commit, once assigned), stay down until the
    next watch, and read as unmeasured: each is restarted unarmed first
    (``calm_disarmed``), so the calm measures processes the faults are done with."""
    _disarm(fleet, report, echo)
    deadline = time.monotonic() + CALM_SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        _watch(fleet, report, seen, echo)
        fleet.probe()
        up = all(m.ready_since is not None for m in fleet.members.values())
        if up and all(
            _gauge(fleet.members[n].metrics_url, ASSIGNED_METRIC) > 0 for n in fleet.names("agents")
        ):
            break
        time.sleep(0.5)
    else:
        report.duplicated_work.append(
            f"unshared: the fleet did not settle (every process up, every agents worker"
            f" assigned) within {CALM_SETTLE_TIMEOUT_S:.0f}s of the faults' end"
        )
        return
    echo(f"  calm: every process up; counting each one's work for {CALM_S:.0f}s")
    metrics = tuple(WORK_METRICS.values())
    unmeasured = _scrape_each(fleet, metrics, echo)
    before = {n: dict(fleet.work(n)) for n in fleet.names()}
    ends = time.monotonic() + CALM_S
    while time.monotonic() < ends:
        _watch(fleet, report, seen, echo)
        time.sleep(0.2)
    unmeasured |= _scrape_each(fleet, metrics, echo)
    if unmeasured:
        report.duplicated_work.append(
            f"unmeasured: {', '.join(sorted(unmeasured))} did not answer /metrics within"
            f" {CALM_SCRAPE_S:.0f}s at the calm's start or end"
        )
    for kind, metric in WORK_METRICS.items():
        names = [n for n in fleet.names(kind) if n not in unmeasured]
        done = {n: fleet.work(n).get(metric, 0.0) - before[n].get(metric, 0.0) for n in names}
        for n, amount in done.items():
            report.calm_work[n] = {metric: amount}
        if len(names) > 1 and min(done.values()) == 0 and max(done.values()) >= SATURATED:
            idle = [n for n, a in done.items() if a == 0]
            if kind == "agents" and waiting_for is not None:
                waiting = {n: waiting_for(n) for n in idle}
                report.calm_idle_without_work += [n for n in idle if waiting[n] == 0]
                idle = [n for n in idle if waiting[n] > 0]
                if not idle:
                    continue
            report.duplicated_work.append(
                f"unshared: in {CALM_S:.0f}s of calm {', '.join(idle)} did no {metric}"
                f" while another did {max(done.values()):.0f}"
            )


def _disarm(fleet: Fleet, report: Report, echo: Echo) -> None:
    """Restart every running incarnation that is still armed, unarmed (``_calm``); one
    that has died at its point already is left to ``_watch``, which restarts it
    unarmed too."""
    disarmed = [
        name
        for name in fleet.names()
        if fleet.members[name].process.armed is not None and fleet.kill(name, None)
    ]
    if disarmed:
        echo(f"  calm: restarted {', '.join(disarmed)} unarmed")
    report.calm_disarmed += disarmed


def _scrape_each(fleet: Fleet, metrics: tuple[str, ...], echo: Echo) -> set[str]:
    """Scrape every process until each has answered once (for at most
    ``CALM_SCRAPE_S``); the ones that never did."""
    pending = set(fleet.names())
    deadline = time.monotonic() + CALM_SCRAPE_S
    while pending and time.monotonic() < deadline:
        pending -= fleet.scrape(metrics, only=pending, timeout=CALM_SCRAPE_TIMEOUT_S)
        if pending:
            echo(f"  calm: no /metrics answer yet from {', '.join(sorted(pending))}; asking again")
            time.sleep(0.5)
    return pending


def _gauge(url: str | None, metric: str) -> float:
    """One unlabelled gauge from a process's /metrics (0 when it does not answer)."""
    import http.client
    import urllib.request

    if url is None:
        return 0.0
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            text = response.read().decode()
    except (OSError, http.client.HTTPException):
        return 0.0
    for line in text.splitlines():
        if line.startswith(metric + " "):
            with contextlib.suppress(ValueError):
                return float(line.split()[1])
    return 0.0


def _label_sets(url: str, metric: str) -> set[str]:
    import http.client
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            text = response.read().decode()
    except (OSError, http.client.HTTPException):  # down, or killed while answering
        return set()
    return {
        line.split("{", 1)[1].split("}", 1)[0]
        for line in text.splitlines()
        if line.startswith(metric + "{")
    }


def render(report: Report, as_json: bool) -> str:
    if as_json:
        return json.dumps(report.as_dict())
    lines = [report.figure_line()]
    if report.scale:
        for name, figures in sorted(report.work.items()):
            calm = report.calm_work.get(name, {})
            lines.append(
                f"  {name}: "
                + ", ".join(
                    f"{k} {v:.0f} ({calm.get(k, 0.0):.0f} in the calm)" for k, v in figures.items()
                )
            )
        lines.append(
            f"  gap fills by agents worker {report.gap_fills},"
            f" duplicated {report.gap_fills_duplicated};"
            f" streams reported by several workers {report.reported_by_several}"
        )
    if report.start_s:
        lines.append(
            "  restarts to healthy: "
            + ", ".join(
                f"{kind} median {t['median']:.1f}s (max {t['max']:.1f}s, {t['restarts']:.0f})"
                for kind, t in report.start_s.items()
            )
        )
    for point, kill in report.rebuild_lane.by_point.items():
        lines.append(
            f"  {point}: {kill['process']} died there at {kill['at_s']:.1f}s"
            f" (rebuild {kill['rebuild']})"
        )
    lines += [f"VIOLATION {v}" for v in report.verdict.violations]
    lines += [f"VIOLATION {d}" for d in report.duplicated_work]
    verdict = "OK" if report.ok else f"FAILED (reproduce with --seed {report.seed})"
    lines.append(f"chaos: {verdict}")
    return "\n".join(lines)
