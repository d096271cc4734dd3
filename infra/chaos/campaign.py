"""``gapless chaos``: the deployed pipeline under faults, then checked from the stores.

1. start the campaign's own PostgreSQL, broker (or with ``cluster`` three Kafka
   nodes) and S3 server (``infra.chaos.services``), migrate them and create the
   topics;
2. start the processes (``infra.chaos.roster``, ``infra.chaos.fleet``): one relay,
   two agents workers, one capture worker and resolver API, or with ``scale`` two
   relays, three agents workers and two capture workers; every agents incarnation
   armed with the rebuild lane's crash points, once each in the campaign
   (``infra.chaos.lane``);
3. set up the workload (``infra.chaos.load``: items for the API deciders, the
   collectors' credentials, the poison) and start it, and the progress sampler;
4. run the plan (``infra.chaos.schedule``, from the seed; ``infra.chaos.delivery``)
   for ``seconds``: kills in one lane, service faults in another; ask for a shadow
   rebuild at 35 % of the time and fence the fence stream's epoch (``infra.fence``,
   ``infra.chaos.fencing``) at 55 %; processes that died at their armed crash point
   are started again, any other exit is recorded (``infra.chaos.exits``);
   then, until the rebuild and the fence are finished, the lane's kills go on, and
   the points nobody reached are closed;
5. stop the workload and wait for convergence (``infra.chaos.convergence``: every
   process up, every stream published and applied to its cursor, every capture job
   settled, the rebuild and the fence done), up to a generous deadline;
6. read the stores and judge (``infra.chaos.check``), with the lane's figures (each
   rebuild point reached, two workers killed in one rebuild); count each instance's
   work (``infra.chaos.work``);
7. stop the processes and remove the services, whatever failed.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from infra.chaos import check, lane, schedule
from infra.chaos.assignment import held_partitions, waiting_events
from infra.chaos.convergence import CONVERGE_TIMEOUT_S, converge, rebuild_phase
from infra.chaos.crashpoints import Ledger
from infra.chaos.delivery import run_plan, settle_lane
from infra.chaos.exits import watch
from infra.chaos.fencing import Fence
from infra.chaos.fleet import Echo, Fleet
from infra.chaos.load import Load
from infra.chaos.report import Report
from infra.chaos.roster import CONSUMER, build_fleet
from infra.chaos.sampler import Sampler
from infra.chaos.schedule import Options, Planned
from infra.chaos.services import Private, private_services
from infra.chaos.work import WORK_METRICS, count_work
from infra.processes import gauge

CALM_S = 20.0
CALM_SETTLE_TIMEOUT_S = 120.0
CALM_SCRAPE_S = 30.0
"""How long the calm keeps asking a process for its counters at the window's start
and at its end (``CALM_SCRAPE_TIMEOUT_S`` an answer): an answer that timed out is no
figure, and taking the previous one for it would read as no work done."""
CALM_SCRAPE_TIMEOUT_S = 10.0
ASSIGNED_METRIC = "gapless_agents_assigned_partitions"
SATURATED = 50
"""An instance that did at least this much work while another of its kind did none
shows the work was not shared."""


@dataclass
class Settings:
    seed: int
    kills: int
    seconds: float
    scale: bool = False
    cluster: bool = False
    """Three Kafka nodes; broker faults are leader kills (``infra.chaos.schedule``)."""
    pg_restarts: int = 4
    broker_restarts: int = 3
    s3_outages: int = 2
    registry_restarts: int = 1
    registry_outages: int = 1
    proxy_faults: int = 4


def run_campaign(settings: Settings, echo: Echo) -> Report:
    """Steps 1-7 above."""
    report = Report(settings.seed, settings.scale, settings.cluster)
    run_id = f"chaos{uuid.uuid4().hex[:6]}"
    from infra.local.layout import current_layout

    logs = current_layout().logs  # the main local directory's: they outlive the run
    logs.mkdir(parents=True, exist_ok=True)
    with private_services(echo, cluster=settings.cluster) as services:
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
    fleet = build_fleet(settings.scale, services, logs, run_id, book, echo)
    plan = _plan(settings, fleet, run_id, echo)
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
        fence = Fence(databases, kafka, load.fence_stream, echo, CONVERGE_TIMEOUT_S)
        began = time.time()
        run_plan(plan, settings.seconds, fleet, services, rebuild, fence, load, report, seen, echo)
        settle_lane(book, fleet, rebuild, fence, report, seen, echo)
        if settings.scale:
            waiting_for = _waiting_for(logs, run_id, kafka, databases.product_dsn)
            _calm(fleet, report, seen, echo, waiting_for)
        echo("faults over; stopping the workload…")
        load.stop()
        seen.workload_errors += load.errors
        stopped = time.monotonic()
        echo("waiting for convergence…")
        seen.converged = converge(databases, load, fleet, fence, rebuild, report, seen, echo)
        report.converged_s = round(time.monotonic() - stopped, 1) if seen.converged else None
        seen.rebuild_phase = rebuild_phase(rebuild)
        seen.fence_done = fence.done
        _lane_figures(databases.product_dsn, book, fleet, began, report, seen, echo)
        count_work(fleet, report, logs, run_id)
        report.start_s = _start_times(fleet)
    finally:
        sampler.stop()
        fleet.stop_all()
    seen.regressions = [str(r) for r in sampler.monotone.regressions]
    report.samples = sampler.samples
    _judge(databases, kafka, load, seen, report)


def _plan(settings: Settings, fleet: Fleet, run_id: str, echo: Echo) -> list[Planned]:
    """The seed's plan for this fleet (``infra.chaos.schedule``), said in one line."""
    options = Options(
        seconds=settings.seconds,
        kills=settings.kills,
        processes=fleet.names(),
        pg_restarts=settings.pg_restarts,
        broker_restarts=settings.broker_restarts,
        s3_outages=settings.s3_outages,
        registry_restarts=settings.registry_restarts,
        registry_outages=settings.registry_outages,
        proxy_faults=settings.proxy_faults,
        cluster=settings.cluster,
    )
    plan = schedule.plan(settings.seed, options)
    echo(
        f"run {run_id}, seed {settings.seed}: {len(fleet.members)} processes, plan "
        + ", ".join(f"{k} {n}" for k, n in sorted(schedule.counts(plan).items()))
    )
    return plan


def _waiting_for(logs: Path, run_id: str, kafka: Any, product_dsn: str) -> Callable[[str], int]:
    """How many events wait in the events partitions an agents worker holds, from the
    assignments in its log (``infra.chaos.assignment``)."""

    def waiting_for(name: str) -> int:
        try:
            log = (logs / f"{run_id}-{name}.log").read_text(errors="replace")
        except OSError:
            return 1  # cannot tell what it holds: its idleness stays a violation
        held = held_partitions(log.splitlines())
        topic = kafka.events_topic
        return waiting_events(kafka, product_dsn, topic, CONSUMER, held)

    return waiting_for


def _judge(databases: Any, kafka: Any, load: Load, seen: check.Seen, report: Report) -> None:
    """Step 6: read the stores, judge them with what the campaign saw, and add the
    workload's figures and its answers the API should not have given."""
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
        "api_unavailable": dict(load.api.unavailable),
        "captures_posted": load.captures.posted,
        "poison_sent": len(load.poison),
        "undecodable_on_topic": observed.undecodable_on_topic,
        "rows_compared": observed.rows_compared,
    }
    if load.api.refused:
        report.verdict.violations.append(f"api: unexpected answers {dict(load.api.refused)}")
    if load.api.gave_up:
        report.verdict.violations.append(f"api: {load.api.gave_up} decisions never answered")


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
        watch(fleet, report, seen, echo)
        fleet.probe()
        up = all(m.ready_since is not None for m in fleet.members.values())
        if up and all(
            gauge(fleet.members[n].metrics_url, ASSIGNED_METRIC) > 0 for n in fleet.names("agents")
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
        watch(fleet, report, seen, echo)
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
    that has died at its point already is left to ``exits.watch``, which restarts it
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
