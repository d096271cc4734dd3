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
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.product import rebuilds
from db.resolver.outbox import published_position
from db.resolver.retention import committed_position
from infra.bench.rebuild import process_env
from infra.bench.sandbox import Echo, Sandbox, sandbox
from infra.demo.projection_check import compare
from infra.demo.workload import run_workload
from infra.fence import fence_epoch
from infra.local.postgres import PG_BIN
from infra.pause import pause_catalog
from infra.processes import Deployed, free_port
from producers.retention.consumers import declare_standing
from schemas.ids import StreamId
from schemas.settings import KafkaSettings

CATALOG = "c1"
CONSUMER = "product-applier"
START_TIMEOUT_S = 90.0
CONVERGE_TIMEOUT_S = 180.0
POLL_S = 0.1
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


@dataclass
class DrillReport:
    drill_ok: bool = False
    drill_pause_s: float = 0.0
    drill_restore_s: float = 0.0
    drill_fence_s: float = 0.0
    drill_rebuild_s: float = 0.0
    drill_resume_s: float = 0.0
    drill_recovery_s: float = 0.0
    backup_position: int = 0
    position_before_restore: int = 0
    events_lost_to_restore: int = 0
    old_epoch_in_kafka: int = 0
    old_epoch_deliveries: int = 0
    old_epoch_applied: int = 0
    old_epoch_unjudged: int = 0
    new_epoch: int = 0
    new_epoch_first_position: int | None = None
    new_epoch_positions: int = 0
    drill_events: int = 0
    drill_agents_workers: int = 0
    drill_reporting_resumed: bool = False
    drill_pruned_after_fence: bool = False
    new_epoch_reported: int = 0
    new_epoch_pruned: int = 0
    writes_refused_while_paused: str | None = None
    reads_refused_while_paused: str | None = None
    paused_by: list[str] = field(default_factory=list)
    rows_compared: int = 0
    mismatched_rows: int = 0
    mismatches: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, float):
                out[k] = round(v, 3)
        return out


def _wait(what: str, ready: Callable[[], bool], processes: list[Deployed], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        for p in processes:
            if p.pid:
                p.require_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL_S)


def _progress(product_dsn: str, stream: StreamId) -> int:
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT position FROM stream_progress WHERE consumer = %s AND tenant_id = %s"
            " AND catalog_id = %s AND history_epoch = %s",
            (CONSUMER, *stream),
        ).fetchone()
    return int(row[0]) if row else 0


def _committed(resolver_dsn: str, stream: StreamId) -> int:
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        return committed_position(conn, stream)


def _published(resolver_dsn: str, stream: StreamId) -> int:
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        return published_position(conn, stream)


def _pg(tool: str, dsn: str, *args: str) -> None:
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    command = [str(PG_BIN / tool), *args]
    for flag, key in (("-h", "host"), ("-p", "port"), ("-U", "user")):
        if key in params:
            command += [flag, str(params[key])]
    command += ["-d", str(params["dbname"])]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr[-2000:]}")


def _restore_in_place(owner_dsn: str, backup: Path) -> None:
    """``pg_restore`` the backup into a new database, then put it in the old one's
    place (drop it, ending every session in it, and rename the new one): what an
    operator restoring in place does, with the database missing for a moment only."""
    name = str(conninfo_to_dict(owner_dsn)["dbname"])
    staging = f"{name}_restoring"
    admin = conninfo_to_dict(owner_dsn)
    admin["dbname"] = "postgres"
    with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(staging)))
    target = conninfo_to_dict(owner_dsn)
    target["dbname"] = staging
    _pg("pg_restore", make_conninfo("", **target), "--exit-on-error", str(backup))
    with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                sql.Identifier(staging), sql.Identifier(name)
            )
        )


class _Writers:
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


def _probe(url: str, token: str, method: str, body: dict[str, Any] | None = None) -> str | None:
    """The error code a paused catalog answered with (None: it answered otherwise)."""
    response = httpx.request(
        method, url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    if response.status_code != 503:
        return None
    code = response.json().get("code")
    return str(code) if code else None


def _old_epoch_audit(product_dsn: str, tenant: str, fenced_at: Any) -> tuple[int, int]:
    """(old-epoch deliveries judged after the fence, those applied after it)."""
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE outcome = 'ignored_old_epoch'),"
            " count(*) FILTER (WHERE outcome = 'applied')"
            " FROM inbox WHERE consumer = %s AND tenant_id = %s AND catalog_id = %s"
            " AND history_epoch = 1 AND received_at >= %s",
            (CONSUMER, tenant, CATALOG, fenced_at),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _reported(resolver_dsn: str, stream: StreamId) -> int:
    """The live consumer's progress on ``stream`` as the resolver last acknowledged it."""
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT reported_position FROM stream_consumer WHERE tenant_id = %s"
            " AND catalog_id = %s AND history_epoch = %s AND consumer_id = %s",
            (*stream, CONSUMER),
        ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _prune(resolver_dsn: str, stream: StreamId) -> int:
    """Prune ``stream`` with no age limit: how many outbox rows went."""
    from producers.retention.pruner import RetentionPolicy, prune_stream

    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        return prune_stream(conn, stream, RetentionPolicy(age_seconds=0, batch_size=1000)).deleted


def run_drill(box: Sandbox, echo: Echo, events: int = DEFAULT_EVENTS) -> DrillReport:
    """Steps 1-8 of the module docstring in ``box``."""
    size = DrillSize.of(events)
    report = DrillReport(drill_agents_workers=AGENTS_WORKERS)
    tenant = box.tenant("restore")
    old = StreamId(tenant, CATALOG, 1)
    dbs = box.databases
    api_port, read_port = free_port(), free_port()
    web_ports = [free_port() for _ in range(AGENTS_WORKERS)]
    env = {
        **process_env(box, api_port, web_ports[0]),
        "GAPLESS_READ_API_PORT": str(read_port),
        "GAPLESS_PAUSE_POLL_SECONDS": "1",
        "GAPLESS_AGENTS_GAP_THRESHOLD_SECONDS": "2",
        "GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS": "1",
    }
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    health = {
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
    live = list(processes.values())
    writers: _Writers | None = None
    try:
        for p in live:
            p.start()
        for p in live:
            if health[p.name]:
                p.wait_ready(START_TIMEOUT_S)
        echo(f"drill: started {', '.join(processes)}")
        # As a deployment declares its consumers (GAPLESS_RETENTION_CONSUMERS): the
        # live consumer holds every stream, the new epoch's too, before it reports.
        with psycopg.connect(dbs.resolver_dsn, autocommit=True) as conn:
            declare_standing(conn, CONSUMER, "drill")
        # 1.
        writers = _Writers(box, tenant, "before", size.pace_seconds)
        _wait(
            "the first events applied",
            lambda: _progress(dbs.product_dsn, old) >= size.before_backup,
            live,
            _timeout(size.before_backup),
        )
        # 2.
        backup = Path(tempfile.mkdtemp(prefix="gapless-drill-")) / "resolver.dump"
        _pg("pg_dump", dbs.resolver_owner_dsn, "-Fc", "-f", str(backup))
        report.backup_position = _committed(dbs.resolver_dsn, old)  # at least the dump's
        echo(f"drill: resolver backed up (pg_dump -Fc), history near {report.backup_position}")
        # 3.
        applied_past = report.backup_position + size.applied_after_backup
        _wait(
            "events after the backup in the projections",
            lambda: _progress(dbs.product_dsn, old) >= applied_past,
            live,
            _timeout(size.applied_after_backup),
        )
        for worker in workers:
            worker.stop()
        stopped_at = _progress(dbs.product_dsn, old)
        in_kafka_past = _committed(dbs.resolver_dsn, old) + size.in_kafka_after_backup
        _wait(
            "events after the agents stopped in Kafka",
            lambda: _published(dbs.resolver_dsn, old) >= in_kafka_past,
            [processes["resolver-api"], processes["relay"]],
            _timeout(size.in_kafka_after_backup),
        )
        writers.stop()
        writers = None
        _wait(
            "the relay to publish everything",
            lambda: _published(dbs.resolver_dsn, old) == _committed(dbs.resolver_dsn, old),
            [processes["relay"]],
            START_TIMEOUT_S,
        )
        report.position_before_restore = _committed(dbs.resolver_dsn, old)
        report.old_epoch_in_kafka = report.position_before_restore - stopped_at
        echo(
            f"drill: history at {report.position_before_restore}; the agents stopped at"
            f" {stopped_at}, {report.old_epoch_in_kafka} events wait in Kafka"
        )
        # 4.
        started = time.monotonic()
        paused = pause_catalog(
            dbs, kafka, tenant, CATALOG, "drill", "restore drill", echo, timeout_s=60
        )
        report.drill_pause_s = time.monotonic() - started
        report.paused_by = sorted(h.role for h in paused.holders if h.acknowledged)
        catalog_path = f"/v1/tenants/{tenant}/catalogs/{CATALOG}"
        report.writes_refused_while_paused = _probe(
            f"http://127.0.0.1:{api_port}{catalog_path}/items/drill-probe/split",
            token,
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
            f"http://127.0.0.1:{read_port}{catalog_path}/items", token, "GET"
        )
        # 5.
        at = time.monotonic()
        _restore_in_place(dbs.resolver_owner_dsn, backup)
        report.drill_restore_s = time.monotonic() - at
        restored = _committed(dbs.resolver_dsn, old)
        report.events_lost_to_restore = report.position_before_restore - restored
        report.backup_position = restored
        echo(f"drill: restored in place: history ends at {restored} again")

        # 6.
        def follow(rebuild_id: uuid.UUID) -> str | None:
            for worker in workers:  # the lagging consumer comes back after the fence
                worker.start()
            for worker in workers:
                worker.wait_ready(START_TIMEOUT_S)
            deadline = time.monotonic() + _timeout(report.position_before_restore)
            with psycopg.connect(dbs.product_dsn, autocommit=True) as conn:
                while True:
                    row = rebuilds.get(conn, rebuild_id)
                    if row is not None and row.phase in ("done", "failed", "cancelled"):
                        return row.phase
                    if time.monotonic() > deadline:
                        return row.phase if row else None
                    for p in live:
                        p.require_alive()
                    time.sleep(POLL_S)

        fenced = fence_epoch(
            dbs, kafka, CONSUMER, tenant, CATALOG, 1, "drill", "restore drill", echo, follow
        )
        report.new_epoch = fenced.epoch
        report.drill_fence_s = fenced.seconds.get("pause", 0.0) + fenced.seconds.get("fence", 0.0)
        report.drill_rebuild_s = fenced.seconds.get("rebuild", 0.0)
        report.drill_resume_s = fenced.seconds.get("resume", 0.0)
        report.drill_recovery_s = time.monotonic() - started
        if fenced.resumed is None:
            report.failures.append(f"not resumed: the rebuild is {fenced.rebuild_phase}")
            return report
        echo(f"drill: resumed at epoch {fenced.epoch} after {report.drill_recovery_s:.1f}s")
        # 7.
        new = StreamId(tenant, CATALOG, fenced.epoch)
        writers = _Writers(box, tenant, "after", size.pace_seconds)
        _wait(
            "writes at the new epoch",
            lambda: _committed(dbs.resolver_dsn, new) >= size.new_epoch,
            live,
            _timeout(size.new_epoch),
        )
        writers.stop()
        writers = None
        _wait(
            "the agents to apply the new epoch",
            lambda: _progress(dbs.product_dsn, new) == _committed(dbs.resolver_dsn, new),
            live,
            _timeout(size.new_epoch),
        )
        committed_new = _committed(dbs.resolver_dsn, new)
        report.drill_events = report.position_before_restore + committed_new
        try:
            _wait(
                "the agents to report their progress at the new epoch",
                lambda: _reported(dbs.resolver_dsn, new) >= committed_new,
                live,
                CONVERGE_TIMEOUT_S,
            )
        except RuntimeError as exc:
            report.failures.append(str(exc))
        report.new_epoch_reported = _reported(dbs.resolver_dsn, new)
        report.drill_reporting_resumed = report.new_epoch_reported >= committed_new > 0

        with psycopg.connect(dbs.control_dsn, autocommit=True) as conn:
            issued = conn.execute(
                "SELECT issued_at FROM history_epoch_log WHERE tenant_id = %s"
                " AND catalog_id = %s AND epoch = %s",
                (tenant, CATALOG, fenced.epoch),
            ).fetchone()
        assert issued is not None
        fenced_at = issued[0]

        def judged() -> bool:
            seen, _ = _old_epoch_audit(dbs.product_dsn, tenant, fenced_at)
            return seen >= report.old_epoch_in_kafka

        try:
            _wait("every old-epoch message in Kafka judged", judged, live, CONVERGE_TIMEOUT_S)
        except RuntimeError as exc:
            report.failures.append(str(exc))
        report.old_epoch_deliveries, report.old_epoch_applied = _old_epoch_audit(
            dbs.product_dsn, tenant, fenced_at
        )
        report.old_epoch_unjudged = max(0, report.old_epoch_in_kafka - report.old_epoch_deliveries)
        # 8.
        with psycopg.connect(dbs.resolver_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT min(position), count(*), max(position) FROM outbox WHERE tenant_id = %s"
                " AND catalog_id = %s AND history_epoch = %s",
                tuple(new),
            ).fetchone()
        assert row is not None
        report.new_epoch_first_position = None if row[0] is None else int(row[0])
        report.new_epoch_positions = int(row[1])
        if row[2] is not None and int(row[2]) != int(row[1]):
            report.failures.append(f"new-epoch positions not contiguous: {row}")
        with psycopg.connect(dbs.product_dsn, autocommit=True) as conn:
            gen = conn.execute(
                "SELECT generation FROM stream_progress WHERE consumer = %s AND tenant_id = %s"
                " AND catalog_id = %s AND history_epoch = %s",
                (CONSUMER, *new),
            ).fetchone()
        generation = int(gen[0]) if gen else 1
        comparison = compare(dbs.resolver_dsn, dbs.product_dsn, tenant, generation)
        report.rows_compared = sum(comparison.rows.values())
        report.mismatched_rows = len(comparison.differences)
        report.mismatches = [str(d) for d in comparison.differences[:10]]
        # Last, as an operator's retention pass would: it deletes the outbox rows
        # counted above. The live consumer is a standing one, so only its reports
        # let any of them go.
        report.new_epoch_pruned = _prune(dbs.resolver_dsn, new)
        report.drill_pruned_after_fence = report.new_epoch_pruned > 0
        echo(
            f"drill: the new epoch reported at {report.new_epoch_reported} of"
            f" {committed_new}; {report.new_epoch_pruned} of its events pruned"
        )
    finally:
        if writers is not None:
            writers.stop()
        for p in reversed(live):
            p.stop()
    checks = {
        "old_epoch_applied": report.old_epoch_applied == 0,
        "old_epoch_delivered": report.old_epoch_deliveries > 0 and not report.old_epoch_unjudged,
        "rows_match": report.rows_compared > 0 and report.mismatched_rows == 0,
        "new_epoch_from_1": report.new_epoch_first_position == 1,
        "writes_refused": report.writes_refused_while_paused == "STREAM_PAUSED",
        "reads_refused": report.reads_refused_while_paused == "STREAM_BEING_RESTORED",
        "lost_to_restore": report.events_lost_to_restore > 0,
        "reporting_resumed": report.drill_reporting_resumed,
        "pruned_after_fence": report.drill_pruned_after_fence,
    }
    report.failures += [name for name, ok in checks.items() if not ok]
    report.drill_ok = not report.failures
    return report


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


def render(report: DrillReport) -> str:
    rows = [
        ("pause (every process acknowledged)", f"{report.drill_pause_s:.2f} s"),
        ("restore in place (pg_restore)", f"{report.drill_restore_s:.2f} s"),
        ("fence (epoch issued, old streams fenced)", f"{report.drill_fence_s:.2f} s"),
        ("rebuild at the new epoch", f"{report.drill_rebuild_s:.2f} s"),
        ("resume (every process acknowledged)", f"{report.drill_resume_s:.2f} s"),
        ("recovery, pause to resume", f"{report.drill_recovery_s:.2f} s"),
        ("events lost to the restore (RPO)", str(report.events_lost_to_restore)),
        ("old-epoch deliveries after the fence", str(report.old_epoch_deliveries)),
        ("  of them applied", str(report.old_epoch_applied)),
        ("new epoch starts at position", str(report.new_epoch_first_position)),
        ("events written (both epochs)", str(report.drill_events)),
        ("agents workers", str(report.drill_agents_workers)),
        ("progress reported at the new epoch", str(report.new_epoch_reported)),
        ("new-epoch events pruned after the fence", str(report.new_epoch_pruned)),
        ("rows compared / mismatched", f"{report.rows_compared} / {report.mismatched_rows}"),
        ("paused and acknowledged by", ", ".join(report.paused_by)),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    verdict = "drill: OK" if report.drill_ok else f"drill: FAILED ({', '.join(report.failures)})"
    return "\n".join([*lines, verdict])


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
