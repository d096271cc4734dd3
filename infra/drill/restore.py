"""``gapless drill restore``: restore the resolver database from a backup under load,
fence its old history, rebuild and resume — and measure it.

In a sandbox of its own (databases and topics, dropped afterwards), with the
deployed processes (``gapless resolver-api``, ``relay``, ``agents``, ``read-api``)
as subprocesses:

1. writers commit decisions on one catalog while the pipeline applies them, through
   two agents workers (one consumer group, as a deployment runs them);
2. back the resolver database up with ``pg_dump -Fc`` (cursor W_b);
3. writes go on until the projections hold events after W_b; then the agents stop
   (a consumer lagging behind) while more events reach Kafka; the writers stop;
4. pause the catalog (``infra.pause``; timed: ``drill_pause_s``) and probe it: the
   decision API answers ``STREAM_PAUSED``, the read API ``STREAM_BEING_RESTORED``;
5. restore the backup in place (``pg_restore`` into a new database that then takes
   the old one's name): its history ends at W_b again, though Kafka and the projections
   hold events after it; nobody has fenced yet, so the stream's history went back;
6. run the fence procedure (``infra.fence``: joins the pause, issues the next epoch,
   fences the old streams; ``drill_fence_s``), start the agents again, which meet
   the old epoch's events still in Kafka, and follow the rebuild at the new epoch
   (``drill_rebuild_s``); the procedure resumes the catalog;
7. writers commit again: the new epoch's stream starts at position 1; wait until
   the agents applied it all and judged every old-epoch message in Kafka;
8. check: the serving generation equals the accepted state row by row; no
   old-epoch delivery was applied after the fence, each has a terminal audited
   outcome; the new epoch's positions are 1..n; the agents report their progress at
   the new epoch to the resolver again (``drill_reporting_resumed``) and pruning
   advances there (``drill_pruned_after_fence``): what an operator checks before
   calling the catalog recovered.

``--events N`` sizes the run: about 60 % of N before the backup, 10 % each applied
and left in Kafka after it, 20 % at the new epoch (at least 150/40/40/60). Small runs
pace the writers (a steady load); from 2,000 events on they write as fast as they can.

``drill_recovery_s`` runs from the pause to the resume: what an operator would
report as the time to recover (the RTO the seed leaves to the business); the RPO is
what the backup did not hold (``events_lost_to_restore``).

``run_drill`` runs the steps as phases of their own. The processes and the writers
are ``infra.drill.rig``'s, the backup and the restore ``infra.drill.backup``'s, what
the drill reads of the databases ``infra.drill.readings``'s, the report and its
checks ``infra.drill.report``'s.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from db.product import rebuilds
from infra.bench.sandbox import Echo, Sandbox, sandbox
from infra.demo.projection_check import compare
from infra.drill import readings
from infra.drill.backup import pg_tool, restore_in_place
from infra.drill.report import DrillReport, judge, render
from infra.drill.rig import CATALOG, CONSUMER, POLL_S, START_TIMEOUT_S, Rig, build_rig, wait_for
from infra.fence import FenceReport, fence_epoch
from infra.pause import pause_catalog
from producers.retention.consumers import declare_standing
from schemas.ids import StreamId

CONVERGE_TIMEOUT_S = 180.0
PRUNE_TIMEOUT_S = 30.0
DEFAULT_EVENTS = 300
AGENTS_WORKERS = 2
PACED_UP_TO = 2_000
"""Runs of up to this many events pace their writers (0.02 s between decisions)."""


@dataclass(frozen=True)
class DrillSize:
    """How many events the drill writes in each step (module docstring)."""

    before_backup: int
    applied_after_backup: int
    in_kafka_after_backup: int
    new_epoch: int
    pace_seconds: float

    @classmethod
    def of(cls, events: int) -> DrillSize:
        if events < 1:
            raise ValueError(f"--events must be at least 1, not {events}")
        return cls(
            before_backup=max(150, events * 6 // 10),
            applied_after_backup=max(40, events // 10),
            in_kafka_after_backup=max(40, events // 10),
            new_epoch=max(60, events // 5),
            pace_seconds=0.02 if events <= PACED_UP_TO else 0.0,
        )


def run_drill(box: Sandbox, echo: Echo, events: int = DEFAULT_EVENTS) -> DrillReport:
    """Steps 1-8 of the module docstring in ``box``."""
    size = DrillSize.of(events)
    report = DrillReport(drill_agents_workers=AGENTS_WORKERS)
    rig = build_rig(box, AGENTS_WORKERS)
    try:
        _start(rig, echo)
        _write_before_backup(rig, size)
        backup = _back_up(rig, report, echo)
        _leave_events_after_backup(rig, size, report, echo)
        started = _pause(rig, report, echo)
        _restore(rig, backup, report, echo)
        fenced = _fence(rig, started, report, echo)
        if fenced.resumed is None:
            report.failures.append(f"not resumed: the rebuild is {fenced.rebuild_phase}")
            return report
        echo(f"drill: resumed at epoch {fenced.epoch} after {report.drill_recovery_s:.1f}s")
        new = StreamId(rig.tenant, CATALOG, fenced.epoch)
        committed_new = _write_new_epoch(rig, new, size, report)
        _judge_old_epoch(rig, fenced.epoch, report)
        _check_new_epoch(rig, new, committed_new, report, echo)
    finally:
        rig.stop()
    judge(report)
    return report


def _start(rig: Rig, echo: Echo) -> None:
    """Every process started and ready; the live consumer declared a standing one."""
    for p in rig.live:
        p.start()
    for p in rig.live:
        if rig.health[p.name]:
            p.wait_ready(START_TIMEOUT_S)
    echo(f"drill: started {', '.join(rig.processes)}")
    # As a deployment declares its consumers (GAPLESS_RETENTION_CONSUMERS): the
    # live consumer holds every stream, the new epoch's too, before it reports.
    with psycopg.connect(rig.box.databases.resolver_dsn, autocommit=True) as conn:
        declare_standing(conn, CONSUMER, "drill")


def _write_before_backup(rig: Rig, size: DrillSize) -> None:
    """Step 1: the writers start; until the first events are applied."""
    dbs, old = rig.box.databases, rig.old
    rig.start_writers("before", size.pace_seconds)
    wait_for(
        "the first events applied",
        lambda: readings.progress(dbs.product_dsn, old) >= size.before_backup,
        rig.live,
        _timeout(size.before_backup),
    )


def _back_up(rig: Rig, report: DrillReport, echo: Echo) -> Path:
    """Step 2: ``pg_dump -Fc`` of the resolver database, under the load; the file."""
    dbs = rig.box.databases
    backup = Path(tempfile.mkdtemp(prefix="gapless-drill-")) / "resolver.dump"
    pg_tool("pg_dump", dbs.resolver_owner_dsn, "-Fc", "-f", str(backup))
    report.backup_position = readings.committed(dbs.resolver_dsn, rig.old)  # at least the dump's
    echo(f"drill: resolver backed up (pg_dump -Fc), history near {report.backup_position}")
    return backup


def _leave_events_after_backup(rig: Rig, size: DrillSize, report: DrillReport, echo: Echo) -> None:
    """Step 3: events after the backup reach the projections; then the agents stop
    while more reach Kafka; the writers stop and the relay publishes everything."""
    dbs, old = rig.box.databases, rig.old
    applied_past = report.backup_position + size.applied_after_backup
    wait_for(
        "events after the backup in the projections",
        lambda: readings.progress(dbs.product_dsn, old) >= applied_past,
        rig.live,
        _timeout(size.applied_after_backup),
    )
    for worker in rig.workers:
        worker.stop()
    stopped_at = readings.progress(dbs.product_dsn, old)
    in_kafka_past = readings.committed(dbs.resolver_dsn, old) + size.in_kafka_after_backup
    wait_for(
        "events after the agents stopped in Kafka",
        lambda: readings.published(dbs.resolver_dsn, old) >= in_kafka_past,
        [rig.processes["resolver-api"], rig.processes["relay"]],
        _timeout(size.in_kafka_after_backup),
    )
    rig.stop_writers()
    wait_for(
        "the relay to publish everything",
        lambda: (
            readings.published(dbs.resolver_dsn, old) == readings.committed(dbs.resolver_dsn, old)
        ),
        [rig.processes["relay"]],
        START_TIMEOUT_S,
    )
    report.position_before_restore = readings.committed(dbs.resolver_dsn, old)
    report.old_epoch_in_kafka = report.position_before_restore - stopped_at
    echo(
        f"drill: history at {report.position_before_restore}; the agents stopped at"
        f" {stopped_at}, {report.old_epoch_in_kafka} events wait in Kafka"
    )


def _pause(rig: Rig, report: DrillReport, echo: Echo) -> float:
    """Step 4: the catalog paused (timed) and probed through both APIs; the instant the
    pause began, where the recovery's time starts."""
    started = time.monotonic()
    paused = pause_catalog(
        rig.box.databases,
        rig.kafka,
        rig.tenant,
        CATALOG,
        "drill",
        "restore drill",
        echo,
        timeout_s=60,
    )
    report.drill_pause_s = time.monotonic() - started
    report.paused_by = sorted(h.role for h in paused.holders if h.acknowledged)
    catalog_path = f"/v1/tenants/{rig.tenant}/catalogs/{CATALOG}"
    report.writes_refused_while_paused = _probe(
        f"http://127.0.0.1:{rig.api_port}{catalog_path}/items/drill-probe/split",
        rig.token,
        "POST",
        {
            "actor": "drill",
            "rationale": "probe",
            "evidence": [{"capture_id": "drill", "locator": "$"}],
            "successors": [{"item_id": "p1", "title": "a"}, {"item_id": "p2", "title": "b"}],
            "remaps": {},
        },
    )
    report.reads_refused_while_paused = _probe(
        f"http://127.0.0.1:{rig.read_port}{catalog_path}/items", rig.token, "GET"
    )
    return started


def _restore(rig: Rig, backup: Path, report: DrillReport, echo: Echo) -> None:
    """Step 5: the backup restored in place (timed); what the history lost."""
    dbs = rig.box.databases
    at = time.monotonic()
    restore_in_place(dbs.resolver_owner_dsn, backup)
    report.drill_restore_s = time.monotonic() - at
    restored = readings.committed(dbs.resolver_dsn, rig.old)
    report.events_lost_to_restore = report.position_before_restore - restored
    report.backup_position = restored
    echo(f"drill: restored in place: history ends at {restored} again")


def _fence(rig: Rig, started: float, report: DrillReport, echo: Echo) -> FenceReport:
    """Step 6: the fence procedure, the agents started again once it follows its
    rebuild; its timings, and the recovery's from ``started``."""
    dbs = rig.box.databases

    def follow(rebuild_id: uuid.UUID) -> str | None:
        for worker in rig.workers:  # the lagging consumer comes back after the fence
            worker.start()
        for worker in rig.workers:
            worker.wait_ready(START_TIMEOUT_S)
        deadline = time.monotonic() + _timeout(report.position_before_restore)
        with psycopg.connect(dbs.product_dsn, autocommit=True) as conn:
            while True:
                row = rebuilds.get(conn, rebuild_id)
                if row is not None and row.phase in ("done", "failed", "cancelled"):
                    return row.phase
                if time.monotonic() > deadline:
                    return row.phase if row else None
                for p in rig.live:
                    p.require_alive()
                time.sleep(POLL_S)

    fenced = fence_epoch(
        dbs, rig.kafka, CONSUMER, rig.tenant, CATALOG, 1, "drill", "restore drill", echo, follow
    )
    report.new_epoch = fenced.epoch
    report.drill_fence_s = fenced.seconds.get("pause", 0.0) + fenced.seconds.get("fence", 0.0)
    report.drill_rebuild_s = fenced.seconds.get("rebuild", 0.0)
    report.drill_resume_s = fenced.seconds.get("resume", 0.0)
    report.drill_recovery_s = time.monotonic() - started
    return fenced


def _write_new_epoch(rig: Rig, new: StreamId, size: DrillSize, report: DrillReport) -> int:
    """Step 7: writes at the new epoch, applied and reported by the agents; the
    position committed there."""
    dbs = rig.box.databases
    rig.start_writers("after", size.pace_seconds)
    wait_for(
        "writes at the new epoch",
        lambda: readings.committed(dbs.resolver_dsn, new) >= size.new_epoch,
        rig.live,
        _timeout(size.new_epoch),
    )
    rig.stop_writers()
    wait_for(
        "the agents to apply the new epoch",
        lambda: (
            readings.progress(dbs.product_dsn, new) == readings.committed(dbs.resolver_dsn, new)
        ),
        rig.live,
        _timeout(size.new_epoch),
    )
    committed_new = readings.committed(dbs.resolver_dsn, new)
    report.drill_events = report.position_before_restore + committed_new
    try:
        wait_for(
            "the agents to report their progress at the new epoch",
            lambda: readings.reported(dbs.resolver_dsn, new) >= committed_new,
            rig.live,
            CONVERGE_TIMEOUT_S,
        )
    except RuntimeError as exc:
        report.failures.append(str(exc))
    report.new_epoch_reported = readings.reported(dbs.resolver_dsn, new)
    report.drill_reporting_resumed = report.new_epoch_reported >= committed_new > 0
    return committed_new


def _judge_old_epoch(rig: Rig, epoch: int, report: DrillReport) -> None:
    """Step 7: until every old-epoch message in Kafka was judged after the fence; how
    many were, and applied."""
    dbs = rig.box.databases
    fenced_at = readings.issued_at(dbs.control_dsn, rig.tenant, epoch)

    def judged() -> bool:
        seen, _ = readings.old_epoch_audit(dbs.product_dsn, rig.tenant, fenced_at)
        return seen >= report.old_epoch_in_kafka

    try:
        wait_for("every old-epoch message in Kafka judged", judged, rig.live, CONVERGE_TIMEOUT_S)
    except RuntimeError as exc:
        report.failures.append(str(exc))
    report.old_epoch_deliveries, report.old_epoch_applied = readings.old_epoch_audit(
        dbs.product_dsn, rig.tenant, fenced_at
    )
    report.old_epoch_unjudged = max(0, report.old_epoch_in_kafka - report.old_epoch_deliveries)


def _check_new_epoch(
    rig: Rig, new: StreamId, committed_new: int, report: DrillReport, echo: Echo
) -> None:
    """Step 8: the new epoch's positions 1..n, the serving generation row by row
    against the accepted state, and pruning at the new epoch."""
    dbs = rig.box.databases
    row = readings.positions(dbs.resolver_dsn, new)
    report.new_epoch_first_position = None if row[0] is None else int(row[0])
    report.new_epoch_positions = int(row[1])
    if row[2] is not None and int(row[2]) != int(row[1]):
        report.failures.append(f"new-epoch positions not contiguous: {row}")
    generation = readings.serving_generation(dbs.product_dsn, new)
    comparison = compare(dbs.resolver_dsn, dbs.product_dsn, rig.tenant, generation)
    report.rows_compared = sum(comparison.rows.values())
    report.mismatched_rows = len(comparison.differences)
    report.mismatches = [str(d) for d in comparison.differences[:10]]
    # Last, as an operator's retention pass would: it deletes the outbox rows
    # counted above. The live consumer is a standing one, so only its reports
    # let any of them go.
    report.new_epoch_pruned = _prune_new_epoch(rig, new)
    report.drill_pruned_after_fence = report.new_epoch_pruned > 0
    echo(
        f"drill: the new epoch reported at {report.new_epoch_reported} of"
        f" {committed_new}; {report.new_epoch_pruned} of its events pruned"
    )


def _prune_new_epoch(rig: Rig, new: StreamId) -> int:
    """Retention passes on the new epoch until one deletes rows (at most
    ``PRUNE_TIMEOUT_S``): the rows deleted. A pass right after the drill's checks can
    find the floor where it was, because the live consumer's latest report lands a
    moment later; an operator's next pass would delete them, and so does this one."""
    deleted = [0]

    def pruned() -> bool:
        deleted[0] += readings.prune(rig.box.databases.resolver_dsn, new)
        return deleted[0] > 0

    # A timeout is judged by the caller: drill_pruned_after_fence stays False.
    with contextlib.suppress(RuntimeError):
        wait_for(
            "a retention pass on the new epoch to delete rows", pruned, rig.live, PRUNE_TIMEOUT_S
        )
    return deleted[0]


def _probe(url: str, token: str, method: str, body: dict[str, Any] | None = None) -> str | None:
    """The error code a paused catalog answered with (None: it answered otherwise)."""
    response = httpx.request(
        method, url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    if response.status_code != 503:
        return None
    code = response.json().get("code")
    return str(code) if code else None


def _timeout(events: int) -> float:
    """How long a step of ``events`` events may take: the fixed start-up allowance,
    plus 20 ms an event (a slow machine writes and applies 50 events/s)."""
    return START_TIMEOUT_S + events * 0.02


def run_restore_drill(as_json: bool, echo: Echo, events: int = DEFAULT_EVENTS) -> int:
    """Prepare the local services, run the drill in a sandbox, print it; the exit code."""
    from infra.bench.machine import MachineLoad
    from infra.bench.run import environment_of
    from infra.config import use_local_services
    from infra.provision import provision

    use_local_services()
    provision(echo)
    machine = MachineLoad()
    with sandbox(echo, extra_topics={"events": 6, "control": 1, "status": 1}) as box:
        environment = environment_of(box)
        report = run_drill(box, echo, events)
    environment.update(machine.finish())
    report.environment = environment
    if as_json:
        print(json.dumps(report.as_dict()))
    else:
        print(render(report))
    return 0 if report.drill_ok else 1


def demo_drill(echo: Echo) -> dict[str, Any]:
    """The drill as ``gapless demo`` ends with it: in a sandbox, its main figures."""
    echo("restore drill: backup under load, restore in place, fence, rebuild, resume…")
    with sandbox(echo, extra_topics={"events": 6, "control": 1, "status": 1}) as box:
        report = run_drill(box, echo)
    keep = (
        "drill_ok",
        "drill_pause_s",
        "drill_fence_s",
        "drill_rebuild_s",
        "drill_resume_s",
        "drill_recovery_s",
        "events_lost_to_restore",
        "old_epoch_deliveries",
        "old_epoch_applied",
        "new_epoch_first_position",
        "rows_compared",
        "mismatched_rows",
        "drill_reporting_resumed",
        "drill_pruned_after_fence",
        "failures",
    )
    return {k: v for k, v in report.as_dict().items() if k in keep}
