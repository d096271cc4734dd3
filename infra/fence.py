"""Fencing a restored catalog's history: the operator's procedure, step by step.

After the resolver database is restored from a backup, the events it had published
since describe a history that no longer exists. ``fence_epoch`` (``gapless
fence-epoch``) carries out, for one catalog and the epoch being fenced:

1. issue the next epoch in the control database, the only authority
   (``db.epochs.issue_next``: once, logged with who, why and which epoch);
2. fence the catalog's older streams in the resolver database
   (``db.fencing.fence_older_epochs``): no writer commits and no relay publishes
   into them any more; their rows stay as history, never relabelled;
3. settle what the live consumer still holds open of the older epochs in the
   product database (parked events end ``ignored_old_epoch``, open quarantine
   entries ``superseded``): nothing of an old epoch is applied after the fence;
4. ask for a rebuild of the catalog at the new epoch through the control topic,
   with a request id derived from the catalog and the new epoch, so the same
   procedure asked again is the same request (the agents carry each out once).

Every step is idempotent, so after a crash between two of them the operator runs
the same command again and it completes the rest. Pausing writers, the relay, the
agents and serving through the control topic (issue 12's first step) is not built
yet: writers that go on write to the new epoch from position 1, and the rebuild's
cutover covers what the live consumer applies meanwhile.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from db.epochs import issue_next
from db.fencing import Fenced, Settled, fence_older_epochs, settle_old_epochs
from db.settings import DatabaseSettings
from infra.control import publish, rebuild_command
from schemas.settings import KafkaSettings

Echo = Callable[[str], None]

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
        }


def rebuild_id_for(tenant_id: str, catalog_id: str, epoch: int) -> uuid.UUID:
    return uuid.uuid5(_REQUESTS, f"fence:{tenant_id}/{catalog_id}@{epoch}")


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
) -> FenceReport:
    """Steps 1-4 above, each committed before the next."""
    with psycopg.connect(databases.control_dsn) as conn:
        issued = issue_next(conn, tenant_id, catalog_id, superseded, actor, reason)
        conn.commit()
    report = FenceReport(tenant_id, catalog_id, superseded, issued.epoch, issued.issued_now)
    echo(
        f"1/4 epoch {issued.epoch} of {tenant_id}/{catalog_id}"
        f" {'issued' if issued.issued_now else 'was already issued'}"
    )
    with psycopg.connect(databases.resolver_owner_dsn) as conn:
        report.fenced = fence_older_epochs(conn, tenant_id, catalog_id, issued.epoch)
        conn.commit()
    for f in report.fenced:
        echo(
            f"2/4 fenced {f.stream}: its history ends at {f.position}"
            f" ({f.position - f.published} rows never published, kept)"
        )
    if not report.fenced:
        echo("2/4 no stream left to fence")
    with psycopg.connect(databases.product_dsn) as conn:
        report.settled = settle_old_epochs(conn, consumer, tenant_id, catalog_id, issued.epoch)
        conn.commit()
    echo(
        f"3/4 {report.settled.parked} parked old-epoch event(s) ignored,"
        f" {report.settled.quarantined} quarantine entr(ies) superseded"
    )
    rebuild_id = rebuild_id_for(tenant_id, catalog_id, issued.epoch)
    command = rebuild_command(
        tenant_id, catalog_id, actor, f"fence of epoch {superseded}: {reason}", consumer, rebuild_id
    )
    publish(kafka.kafka_bootstrap, command, kafka.control_topic)
    report.rebuild_id = rebuild_id
    echo(f"4/4 rebuild at epoch {issued.epoch} requested: {rebuild_id}")
    return report
