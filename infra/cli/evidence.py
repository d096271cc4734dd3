"""Evidence retention: one sweep pass, the deployable sweeper, the artifacts flagged
missing, the deletion audit, and regression fixture pins."""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

import click

from infra.cli.output import actor, echo, emit, fail, guarded, process_logging, resolver_conn
from infra.config import load


@click.group()
def evidence() -> None:
    """Evidence retention: sweep, missing artifacts, deletions, fixture pins."""


def _report_json(report: Any) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "captures": [
            {
                "tenant": c.tenant_id,
                "capture_id": str(c.capture_id),
                "evidence_key": c.evidence_key,
                "created_at": c.created_at.isoformat(),
            }
            for c in report.captures
        ],
        "derived_rows": dict(report.derived),
        "objects": [{"evidence_key": o.evidence_key, "reason": o.reason} for o in report.objects],
        "cancelled": report.cancelled,
        "missing": report.missing,
        "kept": report.kept,
    }


def _report_lines(report: Any) -> list[str]:
    verb = "would delete" if report.dry_run else "deleted"
    out = [
        f"capture {c.tenant_id}/{c.capture_id} {verb} ({c.evidence_key})" for c in report.captures
    ]
    out += [f"object {o.evidence_key} {verb} ({o.reason})" for o in report.objects]
    out += [f"object {k}: deletion cancelled, a capture names it again" for k in report.cancelled]
    out += [
        f"MISSING {k}: a kept capture names it, the bucket does not hold it" for k in report.missing
    ]
    kept = ", ".join(f"{reason} {n}" for reason, n in sorted(report.kept.items())) or "none"
    out.append(
        f"{len(report.captures)} captures and {len(report.objects)} objects {verb};"
        f" {len(report.missing)} missing; kept: {kept}"
    )
    return out


@evidence.command("sweep")
@click.option("--dry-run", is_flag=True, help="Say what would go; delete and record nothing.")
@click.option("--json", "as_json", is_flag=True, help="The pass as one JSON object.")
def evidence_sweep(dry_run: bool, as_json: bool) -> None:
    """One pass: delete captures nothing keeps (with their claims, products, runs and
    jobs) once older than GAPLESS_EVIDENCE_RETENTION_SECONDS, then the objects no
    capture names, and flag artifacts kept captures name that the bucket lacks.
    Every deletion is recorded (`gapless evidence deletions`). Exit code 1 when an
    artifact is missing."""
    from producers.capture.evidence_retention.service import sweep_once
    from producers.capture.evidence_retention.settings import EvidenceSweepSettings
    from producers.capture.exceptions import EvidenceRejected, EvidenceUnavailable

    settings = guarded(lambda: load(EvidenceSweepSettings))
    try:
        report = sweep_once(settings, dry_run)
    except (EvidenceUnavailable, EvidenceRejected) as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps(_report_json(report)))
    else:
        for line in _report_lines(report):
            click.echo(line)
    sys.exit(1 if report.missing else 0)


@click.command("evidence-sweeper")
def evidence_sweeper() -> None:
    """Run the evidence sweep every GAPLESS_EVIDENCE_SWEEP_INTERVAL_SECONDS until
    SIGTERM (a deployable process; /healthz, /readyz and /metrics with
    GAPLESS_EVIDENCE_SWEEP_HTTP_PORT)."""
    import logging

    from producers.capture.evidence_retention.service import run
    from producers.capture.evidence_retention.settings import EvidenceSweepSettings

    process_logging("evidence-sweeper")
    settings = guarded(lambda: load(EvidenceSweepSettings))
    log = logging.getLogger("gapless.evidence")

    def on_pass(report: Any) -> None:
        log.info(json.dumps(_report_json(report)).replace('"', "'"))

    run(settings, on_pass)


@evidence.command("missing")
@click.option("--tenant", help="Only this tenant's captures.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per capture.")
def evidence_missing(tenant: str | None, as_json: bool) -> None:
    """Captures whose artifact the last sweep did not find in the bucket. They are
    never deleted for it; restore the object (same bytes, same key) and the next
    sweep clears the flag."""
    from db.resolver import evidence as sql
    from db.unit_of_work import Transaction

    with resolver_conn() as conn:
        rows = sql.missing(Transaction(conn), tenant)
    for m in rows:
        emit(
            as_json,
            {
                "evidence_key": m.evidence_key,
                "tenant": m.tenant_id,
                "capture_id": str(m.capture_id),
                "first_seen_at": m.first_seen_at.isoformat(),
                "checked_at": m.checked_at.isoformat(),
            },
            f"{m.evidence_key}  {m.tenant_id}/{m.capture_id}  missing since"
            f" {m.first_seen_at:%Y-%m-%d %H:%M:%S}",
        )
    if not rows and not as_json:
        echo("no artifact is missing")


@evidence.command("deletions")
@click.option("--after", type=int, default=0, help="Only records after this id.")
@click.option("--limit", type=int, default=500)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record.")
def evidence_deletions(after: int, limit: int, as_json: bool) -> None:
    """The audit of every deletion the sweep made (or has pending)."""
    from db.resolver import evidence as sql
    from db.unit_of_work import Transaction

    with resolver_conn() as conn:
        rows = sql.deletions(Transaction(conn), after, limit)
    for d in rows:
        who = f"{d.tenant_id}/{d.capture_id}" if d.capture_id else "-"
        emit(
            as_json,
            {
                "id": d.id,
                "kind": d.kind,
                "reason": d.reason,
                "evidence_key": d.evidence_key,
                "tenant": d.tenant_id,
                "capture_id": str(d.capture_id) if d.capture_id else None,
                "derived": d.derived,
                "status": d.status,
                "swept_by": d.swept_by,
                "recorded_at": d.recorded_at.isoformat(),
                "completed_at": d.completed_at.isoformat() if d.completed_at else None,
            },
            f"{d.id:>8} {d.kind:<7} {d.reason:<7} {d.status:<9} {d.evidence_key}  {who}",
        )


@evidence.command("pin")
@click.option("--tenant", required=True)
@click.option("--fixture", required=True, help="The regression fixture resting on it.")
@click.option("--reason", required=True, help="Why it is kept (audited).")
@click.argument("capture_id")
def evidence_pin(tenant: str, fixture: str, reason: str, capture_id: str) -> None:
    """Keep a capture and its artifact for a regression fixture, whatever its age."""
    from producers.capture.evidence_retention.fixtures import pin
    from producers.capture.exceptions import CaptureRepairError

    with resolver_conn() as conn:
        try:
            created = pin(conn, tenant, uuid.UUID(capture_id), fixture, actor(), reason)
        except (ValueError, CaptureRepairError) as exc:
            fail(exc)
    click.echo(f"capture {capture_id} {'pinned' if created else 'already pinned'} for {fixture}")


@evidence.command("unpin")
@click.option("--tenant", required=True)
@click.option("--fixture", required=True)
@click.argument("capture_id")
def evidence_unpin(tenant: str, fixture: str, capture_id: str) -> None:
    """Drop a fixture's pin; the capture then ages as any other."""
    from producers.capture.evidence_retention.fixtures import unpin

    with resolver_conn() as conn:
        dropped = unpin(conn, tenant, uuid.UUID(capture_id), fixture)
    click.echo(f"capture {capture_id} {'unpinned' if dropped else 'was not pinned'} for {fixture}")
    sys.exit(0 if dropped else 1)
