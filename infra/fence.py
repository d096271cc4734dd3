"""Fencing a restored catalog's history: the operator's procedure, step by step.

After the resolver database is restored from a backup, the events it had published
since describe a history that no longer exists. ``fence_epoch`` (``gapless
fence-epoch``) carries out, for one catalog and the epoch being fenced:

1. pause the catalog's processing (``infra.pause``): writers, the capture worker,
   the relay, the agents and the read API each acknowledge through the control
   database that they hold the pause; serving answers ``STREAM_BEING_RESTORED``;
2. issue the next epoch in the control database, the only authority
   (``db.control.epochs.issue_next``: once, logged with who, why and which epoch), and in
   the same transaction clear the older epochs' REWOUND flags (``clear_rewound``:
   the fence an unfenced restore needed is this one, whichever order was used);
3. fence the catalog's older streams in the resolver database
   (``db.resolver.fencing.fence_older_epochs``): no writer commits and no relay publishes
   into them any more; their rows stay as history, never relabelled;
4. settle what the live consumer still holds open of the older epochs in the
   product database (parked events end ``ignored_old_epoch``, open quarantine
   entries ``superseded``): nothing of an old epoch is applied after the fence;
5. ask for a rebuild of the catalog at the new epoch through the control topic,
   with a request id derived from the catalog and the new epoch, so the same
   procedure asked again is the same request (the agents carry each out once); a
   derived rebuild that failed or was cancelled, or that the agents refused, is
   given up: the procedure asked again requests the next derived id;
6. when the rebuild is done (followed with ``follow``, or found done when the
   procedure runs again), resume the catalog.

Every step is idempotent (the pause's id too is derived from the catalog and the
fenced epoch), so after a crash between two of them, or a procedure that stopped
at 5 without following the rebuild, the operator runs the same command again and it
completes the rest. Once resumed, running it again changes nothing: the procedure
is found complete before step 1 (the new epoch issued, a rebuild at it done, and a
pause of the catalog resumed after the epoch was issued), also when it held an
operator's pause rather than its own, so it neither pauses the catalog again nor
resumes a pause an operator opened since.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from db.control.epochs import clear_rewound, current_epochs, issue_next
from db.control.fence_runs import load_run, plan_run, recent_runs
from db.control.pauses import open_pause_of, resumed_after_epoch
from db.exceptions import EpochNotIssued
from db.product import rebuilds
from db.product.rebuilds import RebuildRow
from db.resolver.fencing import Fenced, Settled, fence_older_epochs, settle_old_epochs
from db.settings import DatabaseSettings
from infra.control import publish, rebuild_command
from infra.pause import PauseReport, pause_catalog, resume_catalog
from schemas.errors import GaplessError
from schemas.settings import KafkaSettings

Echo = Callable[[str], None]


class FenceRunUnfinished(GaplessError):
    """``--all`` while an earlier run is unfinished (it would fence the new epochs)."""

    code = "FENCE_RUN_UNFINISHED"


class FenceRunNotFound(GaplessError):
    """``--run`` names no fence run of this control database."""

    code = "FENCE_RUN_NOT_FOUND"


_REQUESTS = uuid.UUID("6f1b2a52-4a7e-4d43-9d8e-2f0c8a1e5b7d")
"""Namespace of the rebuild request ids the procedure derives."""


@dataclass
class FenceReport:
    tenant_id: str
    catalog_id: str
    superseded_epoch: int
    epoch: int
    issued_now: bool
    fenced: list[Fenced] = field(default_factory=list)
    settled: Settled = field(default_factory=lambda: Settled(0, 0))
    rebuild_id: uuid.UUID | None = None
    rebuild_phase: str | None = None
    paused: PauseReport | None = None
    resumed: PauseReport | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "tenant_id": self.tenant_id,
            "catalog_id": self.catalog_id,
            "superseded_epoch": self.superseded_epoch,
            "epoch": self.epoch,
            "issued_now": self.issued_now,
            "fenced": [
                {"stream": str(f.stream), "position": f.position, "published": f.published}
                for f in self.fenced
            ],
            "parked_settled": self.settled.parked,
            "quarantine_settled": self.settled.quarantined,
            "rebuild_id": str(self.rebuild_id) if self.rebuild_id else None,
            "rebuild_phase": self.rebuild_phase,
            "pause": self.paused.as_dict() if self.paused else None,
            "resume": self.resumed.as_dict() if self.resumed else None,
            "state": "resumed" if self.resumed or _complete_before(self) else "paused",
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


def rebuild_id_for(tenant_id: str, catalog_id: str, epoch: int, attempt: int = 0) -> uuid.UUID:
    suffix = f"#{attempt}" if attempt else ""
    return uuid.uuid5(_REQUESTS, f"fence:{tenant_id}/{catalog_id}@{epoch}{suffix}")


_GIVEN_UP = ("failed", "cancelled")
"""Phases of a derived rebuild the procedure run again does not hand back."""


def _fence_rebuild_id(product_dsn: str, tenant_id: str, catalog_id: str, epoch: int) -> uuid.UUID:
    """The rebuild this fence asks for: the first derived id that is running, done,
    or not yet answered. One the agents refused (another rebuild of the catalog was
    running then) keeps its answer for good, and one that failed or was cancelled
    stays so: the procedure run again asks with the next id rather than handing
    back the same refusal or failure for ever."""
    with psycopg.connect(product_dsn) as conn:
        for attempt in range(1000):
            rebuild_id = rebuild_id_for(tenant_id, catalog_id, epoch, attempt)
            row = rebuilds.get(conn, rebuild_id)
            if row is not None and row.phase not in _GIVEN_UP:
                return rebuild_id
            if row is None and rebuilds.answer_of(conn, rebuild_id) is None:
                return rebuild_id
    raise RuntimeError(f"{tenant_id}/{catalog_id}: a thousand fence rebuilds given up")


def pause_id_for(tenant_id: str, catalog_id: str, superseded: int) -> uuid.UUID:
    return uuid.uuid5(_REQUESTS, f"fence-pause:{tenant_id}/{catalog_id}@{superseded}")


def _completed(
    databases: DatabaseSettings, consumer: str, tenant_id: str, catalog_id: str, epoch: int
) -> tuple[PauseReport, RebuildRow] | None:
    """The pause that ended the fence issuing ``epoch`` and the rebuild done at it,
    when the procedure is complete: a rebuild of the catalog at ``epoch`` (or later)
    is done and a pause of the catalog was resumed after ``epoch`` was issued. The
    fence's own pause, or an operator's that it joined (the runbook pauses before
    restoring), or one an operator resumed by hand; a pause opened since is someone
    else's, and the procedure leaves it alone."""
    with psycopg.connect(databases.product_dsn) as conn:
        done = rebuilds.done_since_epoch(conn, consumer, tenant_id, catalog_id, epoch)
    if done is None:
        return None
    with psycopg.connect(databases.control_dsn) as conn:
        resumed = resumed_after_epoch(conn, tenant_id, catalog_id, epoch)
    if resumed is None:
        return None
    return PauseReport(resumed.pause_id, tenant_id, catalog_id, "resumed", False), done


def _rebuild_phase(product_dsn: str, rebuild_id: uuid.UUID) -> str | None:
    with psycopg.connect(product_dsn) as conn:
        row = rebuilds.get(conn, rebuild_id)
    return None if row is None else row.phase


class _Laps:
    """The seconds each stage of the procedure took, into a report's ``seconds``."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self._seconds = seconds
        self._clock = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self._seconds[name] = now - self._clock
        self._clock = now


def _found_complete(
    databases: DatabaseSettings, consumer: str, report: FenceReport, echo: Echo
) -> bool:
    """Before step 1: the epoch to fence must be there (``EpochNotIssued``: nothing to
    pause for a typo); True, with the report filled in, when the procedure is complete
    already (``_completed``)."""
    tenant_id, catalog_id = report.tenant_id, report.catalog_id
    superseded = report.superseded_epoch
    with psycopg.connect(databases.control_dsn) as conn:  # nothing to pause for a typo
        current = current_epochs(conn, [(tenant_id, catalog_id)]).get((tenant_id, catalog_id))
    if current is None or current < superseded:
        raise EpochNotIssued(
            f"{tenant_id}/{catalog_id} has no epoch {superseded} to fence"
            f" (current: {current or 'none'})"
        )
    complete = (
        _completed(databases, consumer, tenant_id, catalog_id, superseded + 1)
        if current > superseded
        else None
    )
    if complete is None:
        return False
    report.paused, done = complete
    report.rebuild_id, report.rebuild_phase = done.rebuild_id, done.phase
    echo(
        f"{tenant_id}/{catalog_id}: epoch {superseded + 1} issued, rebuild"
        f" {done.rebuild_id} done, resumed ({report.paused.pause_id}): nothing left to do"
    )
    return True


def _issue_epoch(
    control_dsn: str, report: FenceReport, actor: str, reason: str, echo: Echo
) -> None:
    """Step 2: the next epoch issued (or found issued) and the older epochs' REWOUND
    flags cleared, in one transaction of the control database."""
    tenant_id, catalog_id = report.tenant_id, report.catalog_id
    with psycopg.connect(control_dsn) as conn:
        issued = issue_next(conn, tenant_id, catalog_id, report.superseded_epoch, actor, reason)
        # With the epoch: a stream flagged rewound (an unfenced restore) is fenced now.
        cleared = clear_rewound(conn, tenant_id, catalog_id, issued.epoch, actor)
        conn.commit()
    report.epoch, report.issued_now = issued.epoch, issued.issued_now
    echo(
        f"2/6 epoch {issued.epoch} of {tenant_id}/{catalog_id}"
        f" {'issued' if issued.issued_now else 'was already issued'}"
        + (f"; its REWOUND flag cleared ({cleared})" if cleared else "")
    )


def _fence_older(resolver_owner_dsn: str, report: FenceReport, echo: Echo) -> None:
    """Step 3: the catalog's streams of epochs before the issued one fenced in the
    resolver database."""
    with psycopg.connect(resolver_owner_dsn) as conn:
        report.fenced = fence_older_epochs(conn, report.tenant_id, report.catalog_id, report.epoch)
        conn.commit()
    for f in report.fenced:
        echo(
            f"3/6 fenced {f.stream}: its history ends at {f.position}"
            f" ({f.position - f.published} rows never published, kept)"
        )
    if not report.fenced:
        echo("3/6 no stream left to fence")


def _settle(product_dsn: str, consumer: str, report: FenceReport, echo: Echo) -> None:
    """Step 4: what the live consumer holds open of the older epochs settled in the
    product database."""
    with psycopg.connect(product_dsn) as conn:
        report.settled = settle_old_epochs(
            conn, consumer, report.tenant_id, report.catalog_id, report.epoch
        )
        conn.commit()
    echo(
        f"4/6 {report.settled.parked} parked old-epoch event(s) ignored,"
        f" {report.settled.quarantined} quarantine entr(ies) superseded"
    )


def _request_rebuild(
    kafka: KafkaSettings,
    consumer: str,
    report: FenceReport,
    rebuild_id: uuid.UUID,
    actor: str,
    reason: str,
    echo: Echo,
) -> None:
    """Step 5: the rebuild at the new epoch requested on the control topic, unless the
    agents have it already (``report.rebuild_phase``)."""
    if report.rebuild_phase is None:
        command = rebuild_command(
            report.tenant_id,
            report.catalog_id,
            actor,
            f"fence of epoch {report.superseded_epoch}: {reason}",
            consumer,
            rebuild_id,
        )
        publish(kafka.client_config(), command, kafka.control_topic)
        echo(f"5/6 rebuild at epoch {report.epoch} requested: {rebuild_id}")
    else:
        echo(f"5/6 rebuild at epoch {report.epoch}: {rebuild_id} is {report.rebuild_phase}")


def fence_epoch(
    databases: DatabaseSettings,
    kafka: KafkaSettings,
    consumer: str,
    tenant_id: str,
    catalog_id: str,
    superseded: int,
    actor: str,
    reason: str,
    echo: Echo,
    follow: Callable[[uuid.UUID], str | None] | None = None,
    pause_timeout_s: float = 60.0,
) -> FenceReport:
    """Steps 1-6 above, each committed before the next; before step 1,
    ``_found_complete`` checks the epoch and ends here when the procedure is complete.
    Steps 2-5 are ``_issue_epoch``, ``_fence_older``, ``_settle`` and
    ``_request_rebuild``, each recording what it did in the report. ``follow`` waits
    for the rebuild to end and returns its last phase; without it the procedure resumes
    only when it finds the rebuild done already (run it again later)."""
    report = FenceReport(tenant_id, catalog_id, superseded, superseded + 1, False)
    lap = _Laps(report.seconds)
    if _found_complete(databases, consumer, report, echo):
        return report
    paused = pause_catalog(
        databases,
        kafka,
        tenant_id,
        catalog_id,
        actor,
        f"restore: fence of epoch {superseded}: {reason}",
        echo,
        pause_timeout_s,
        pause_id_for(tenant_id, catalog_id, superseded),
    )
    report.paused = paused
    lap("pause")
    echo(f"1/6 {tenant_id}/{catalog_id} {paused.state}")
    _issue_epoch(databases.control_dsn, report, actor, reason, echo)
    _fence_older(databases.resolver_owner_dsn, report, echo)
    _settle(databases.product_dsn, consumer, report, echo)
    lap("fence")
    rebuild_id = _fence_rebuild_id(databases.product_dsn, tenant_id, catalog_id, report.epoch)
    report.rebuild_id = rebuild_id
    report.rebuild_phase = _rebuild_phase(databases.product_dsn, rebuild_id)
    if paused.state == "resumed":
        echo("5/6 the rebuild was done before; 6/6 resumed before: nothing left to do")
        return report
    _request_rebuild(kafka, consumer, report, rebuild_id, actor, reason, echo)
    if follow is not None and report.rebuild_phase not in ("done", "failed", "cancelled"):
        report.rebuild_phase = follow(rebuild_id)
    lap("rebuild")
    if report.rebuild_phase != "done":
        echo(
            f"6/6 not resumed: the rebuild is {report.rebuild_phase or 'requested'};"
            " the catalog stays paused. Run this command again when it is done (or with"
            " --wait to follow it); if it failed or was cancelled, see `gapless rebuild"
            " status` for why, then run this command again: it asks for a new rebuild."
        )
        return report
    report.resumed = resume_catalog(
        databases, kafka, tenant_id, catalog_id, actor, echo, pause_timeout_s
    )
    lap("resume")
    echo(f"6/6 {tenant_id}/{catalog_id} resumed at epoch {report.epoch}")
    return report


@dataclass
class FenceAllReport:
    run_id: uuid.UUID
    planned_now: bool
    catalogs: list[FenceReport] = field(default_factory=list)

    @property
    def resumed(self) -> bool:
        return all(r.resumed is not None or _complete_before(r) for r in self.catalogs)

    def as_dict(self) -> dict[str, object]:
        return {
            "run_id": str(self.run_id),
            "planned_now": self.planned_now,
            "state": "resumed" if self.resumed else "paused",
            "catalogs": [r.as_dict() for r in self.catalogs],
        }


def _complete_before(report: FenceReport) -> bool:
    return report.paused is not None and report.paused.state == "resumed"


def _refuse_while_unfinished(conn: psycopg.Connection) -> None:
    """A new ``--all`` while a run still holds a pause would plan a fence of the epochs
    that run issued: refuse, naming the run to carry on."""
    for run in recent_runs(conn):
        held = [
            (t, c)
            for t, c, e in run.catalogs
            if (p := open_pause_of(conn, t, c)) is not None and p.pause_id == pause_id_for(t, c, e)
        ]
        if held:
            raise FenceRunUnfinished(
                f"fence run {run.run_id} ({run.created_at:%Y-%m-%d %H:%M}) still holds"
                f" {len(held)} catalog(s) paused: carry it on with --run {run.run_id}"
            )


def fence_all(
    databases: DatabaseSettings,
    kafka: KafkaSettings,
    consumer: str,
    actor: str,
    reason: str,
    echo: Echo,
    follow: Callable[[uuid.UUID], str | None] | None = None,
    pause_timeout_s: float = 60.0,
    run_id: uuid.UUID | None = None,
) -> FenceAllReport:
    """The procedure for every catalog of a restored database (``--all``).

    1. plan the run (``db.control.fence_runs``: every catalog at its current epoch) or load
       it by ``run_id``; 2. pause every catalog first, so no writer goes on in one
       while another is fenced; 3. run ``fence_epoch`` for each (issue, fence,
       settle, rebuild requested; resumed where the rebuild is done already); 4. with
       ``follow``, follow each rebuild and run ``fence_epoch`` again, which resumes
       it. A crash anywhere: the same run asked again (its id is printed first)
       carries on; the plan never takes in the epochs the run issued.
    """
    with psycopg.connect(databases.control_dsn) as conn:
        if run_id is None:
            _refuse_while_unfinished(conn)
        run = load_run(conn, run_id) if run_id is not None else plan_run(conn, actor, reason)
        conn.commit()
    if run is None:
        raise FenceRunNotFound(f"no fence run {run_id}: see the id the first run printed")
    report = FenceAllReport(run.run_id, run_id is None)
    echo(f"fence run {run.run_id}: {len(run.catalogs)} catalog(s); run it again with --run")
    for tenant, catalog, superseded in run.catalogs:
        if _completed(databases, consumer, tenant, catalog, superseded + 1) is not None:
            continue  # fenced and resumed before: not paused again
        pause_catalog(
            databases,
            kafka,
            tenant,
            catalog,
            actor,
            f"restore: fence of epoch {superseded}: {run.reason}",
            echo,
            pause_timeout_s,
            pause_id_for(tenant, catalog, superseded),
        )
    for tenant, catalog, superseded in run.catalogs:
        report.catalogs.append(
            fence_epoch(
                databases,
                kafka,
                consumer,
                tenant,
                catalog,
                superseded,
                actor,
                run.reason,
                echo,
                None,
                pause_timeout_s,
            )
        )
    if follow is None:
        return report
    for i, done in enumerate(report.catalogs):
        if done.resumed is not None or _complete_before(done) or done.rebuild_id is None:
            continue
        follow(done.rebuild_id)
        report.catalogs[i] = fence_epoch(
            databases,
            kafka,
            consumer,
            done.tenant_id,
            done.catalog_id,
            done.superseded_epoch,
            actor,
            run.reason,
            echo,
            None,
            pause_timeout_s,
        )
    return report
