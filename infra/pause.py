"""Pausing and resuming a catalog's processing: the operator's side of ``db.control.pauses``.

``pause_catalog`` opens the pause in the control database, announces it on the
control topic and waits until every live process that honours pauses (the decision
API, the capture worker, the relay, the agents, the read API) acknowledged that it
holds it; ``resume_catalog`` closes it, announces that, and waits likewise. Both are
idempotent: run again after a crash or a timeout, they carry on where they stopped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import psycopg

from db.control import pauses
from db.control.pauses import Holder, Pause
from db.settings import DatabaseSettings
from infra.control import pause_command, publish
from schemas.errors import GaplessError
from schemas.settings import KafkaSettings

Echo = Callable[[str], None]


class PauseNotAcknowledged(GaplessError):
    """Some live process did not acknowledge in time. The pause (or the resume) is
    recorded and stays: run the command again to wait for them, or see
    ``gapless status`` for who they are."""

    code = "PAUSE_NOT_ACKNOWLEDGED"


@dataclass
class PauseReport:
    pause_id: uuid.UUID
    tenant_id: str
    catalog_id: str
    state: str  # paused | resumed
    changed_now: bool
    holders: list[Holder] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def missing(self) -> list[Holder]:
        return [h for h in self.holders if not h.acknowledged]

    def as_dict(self) -> dict[str, object]:
        return {
            "pause_id": str(self.pause_id),
            "tenant_id": self.tenant_id,
            "catalog_id": self.catalog_id,
            "state": self.state,
            "changed_now": self.changed_now,
            "acknowledged_by": [h.instance_id for h in self.holders if h.acknowledged],
            "missing": [h.instance_id for h in self.missing],
            "seconds": round(self.seconds, 3),
        }


def _announce(
    kafka: KafkaSettings, kind: Literal["pause", "resume"], pause: Pause, actor: str, reason: str
) -> None:
    publish(
        kafka.client_config(),
        pause_command(kind, pause.pause_id, pause.tenant_id, pause.catalog_id, actor, reason),
        kafka.control_topic,
    )


def _wait(
    databases: DatabaseSettings, report: PauseReport, timeout_s: float, echo: Echo
) -> PauseReport:
    started = time.monotonic()

    def progress(seen: list[Holder]) -> None:
        done = sum(h.acknowledged for h in seen)
        echo(f"   {report.state}: {done}/{len(seen)} process(es) acknowledged")

    report.holders = pauses.wait_acknowledged(
        databases.control_dsn, report.pause_id, report.state, timeout_s, progress
    )
    report.seconds = time.monotonic() - started
    if report.missing:
        names = ", ".join(f"{h.instance_id} ({h.role})" for h in report.missing)
        raise PauseNotAcknowledged(
            f"{report.tenant_id}/{report.catalog_id} is {report.state} in the control"
            f" database, but not acknowledged within {timeout_s:.0f} s by: {names}."
            " Run the command again to wait for them (a process that stopped is no"
            f" longer waited for after {pauses.LIVE_SECONDS:.0f} s)."
        )
    return report


def pause_catalog(
    databases: DatabaseSettings,
    kafka: KafkaSettings,
    tenant_id: str,
    catalog_id: str,
    actor: str,
    reason: str,
    echo: Echo,
    timeout_s: float = 60.0,
    pause_id: uuid.UUID | None = None,
) -> PauseReport:
    """1. open the pause (or find it: ``db.control.pauses.open_pause``); 2. announce it (a
    pause found open is announced again only while some live process has not
    acknowledged it); 3. wait for the acknowledgements. A crash after 1 leaves the
    pause open and unannounced; the processes find it at their next poll, and a run
    again announces it again. Raises ``PauseNotAcknowledged`` when some process stays silent."""
    with psycopg.connect(databases.control_dsn, autocommit=True) as conn:
        pause, opened = pauses.open_pause(conn, tenant_id, catalog_id, actor, reason, pause_id)
    report = PauseReport(pause.pause_id, tenant_id, catalog_id, "paused", opened)
    if pause.resumed_at is not None:  # this procedure's pause, already over
        report.state = "resumed"
        return report
    echo(
        f"   {tenant_id}/{catalog_id} paused"
        f"{'' if opened else ' (already, by ' + pause.paused_by + ')'}: {pause.pause_id}"
    )
    if opened or not all(h.acknowledged for h in _holders(databases, pause.pause_id)):
        _announce(kafka, "pause", pause, actor, reason)  # again: someone has not heard it
    return _wait(databases, report, timeout_s, echo)


def _holders(databases: DatabaseSettings, pause_id: uuid.UUID) -> list[Holder]:
    with psycopg.connect(databases.control_dsn, autocommit=True) as conn:
        return pauses.holders(conn, pause_id)


def resume_catalog(
    databases: DatabaseSettings,
    kafka: KafkaSettings,
    tenant_id: str,
    catalog_id: str,
    actor: str,
    echo: Echo,
    timeout_s: float = 60.0,
) -> PauseReport | None:
    """Close the catalog's open pause, announce it and wait for the acknowledgements;
    None when the catalog was not paused."""
    with psycopg.connect(databases.control_dsn, autocommit=True) as conn:
        pause = pauses.resume(conn, tenant_id, catalog_id, actor)
    if pause is None:
        return None
    echo(f"   {tenant_id}/{catalog_id} resumed: {pause.pause_id}")
    _announce(kafka, "resume", pause, actor, f"resumed by {actor}")
    report = PauseReport(pause.pause_id, tenant_id, catalog_id, "resumed", True)
    return _wait(databases, report, timeout_s, echo)
