"""Capture work waiting on an operator (failures, retry, skip) and replays."""

from __future__ import annotations

import sys
from typing import Any

import click

from infra.cli.output import actor, echo, emit, fail, resolver_conn


@click.group()
def captures() -> None:
    """Capture work waiting on an operator: failures, retry, skip; and replays."""


@captures.command("failures")
@click.option("--tenant", help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per failure.")
def captures_failures(tenant: str | None, as_json: bool) -> None:
    """Failed jobs, then products waiting on a retry or an operator, with their codes."""
    from producers.capture.worker.repair import open_failures

    listed = 0
    with resolver_conn() as conn:
        for f in open_failures(conn, tenant):
            listed += 1
            what = f"item #{f.handle} {f.source_item_id}" if f.kind == "item" else f"job {f.handle}"
            emit(
                as_json,
                {
                    "kind": f.kind,
                    "id": f.handle,
                    "tenant": f.tenant_id,
                    "job_id": str(f.job_id),
                    "capture_id": str(f.capture_id),
                    "source_item_id": f.source_item_id,
                    "status": f.status,
                    "attempts": f.attempts,
                    "error_code": f.error_code,
                    "error": f.error,
                    "next_attempt_at": f.next_attempt_at.isoformat() if f.next_attempt_at else None,
                },
                f"{what:<48} {f.status:<9} {f.error_code or '-':<22} attempts {f.attempts}"
                f"  {(f.error or '')[:80]}",
            )
    if not listed and not as_json:
        echo("no open capture failures")


@captures.command("replay")
@click.option("--tenant", required=True)
@click.argument("capture_ids", nargs=-1, required=True)
@click.option("--reason", default="", help="Why (audited), e.g. the parser change.")
def captures_replay(tenant: str, capture_ids: tuple[str, ...], reason: str) -> None:
    """Process stored captures again with their source's current parser version.

    Each replay is a job of its own, named by the capture and the parser version (a
    second request is the same job); `gapless sweep-jobs` enqueues it.
    """
    import uuid

    from producers.capture.exceptions import CaptureRepairError, SourceNotBound
    from producers.capture.worker.replays import request_replay

    failed = 0
    with resolver_conn() as conn:
        for raw in capture_ids:
            try:
                replay = request_replay(conn, tenant, uuid.UUID(raw), actor(), reason)
            except (ValueError, CaptureRepairError, SourceNotBound) as exc:
                echo(f"{raw}: {getattr(exc, 'code', 'INVALID')}: {exc}")
                failed += 1
                continue
            state = "requested" if replay.created else "already requested"
            click.echo(f"capture {raw}: {replay.kind} job {replay.job_id} {state}")
    sys.exit(1 if failed else 0)


def _repair_target(target: str) -> Any:
    """An item's numeric id, or a job's UUID."""
    import uuid

    if target.isdigit():
        return int(target)
    try:
        return uuid.UUID(target)
    except ValueError:
        fail(ValueError(f"{target!r} is neither a product id (a number) nor a job id (a UUID)"))


@captures.command("retry")
@click.argument("targets", nargs=-1, required=True)
@click.option("--reason", default="", help="What was fixed (audited).")
def captures_retry(targets: tuple[str, ...], reason: str) -> None:
    """Retry failed products (by id) or failed jobs (by job id) now, with fresh budgets."""
    from producers.capture.exceptions import CaptureRepairError
    from producers.capture.worker.repair import retry_item, retry_job

    failed = 0
    with resolver_conn() as conn:
        for target in targets:
            handle = _repair_target(target)
            try:
                if isinstance(handle, int):
                    retry_item(conn, handle, actor(), reason)
                    echo(f"item #{handle}: due now")
                else:
                    count = retry_job(conn, handle, actor(), reason)
                    echo(f"job {handle}: due now, {count} failed product(s) re-queued")
            except CaptureRepairError as exc:
                echo(f"{target}: {exc.code}: {exc.message}")
                failed += 1
    sys.exit(1 if failed else 0)


@captures.command("skip")
@click.argument("target")
@click.option("--reason", required=True, help="Why it is safe to give this up (audited).")
def captures_skip(target: str, reason: str) -> None:
    """Give a failed product (by id) or a failed job (by job id) up, with a reason."""
    from producers.capture.exceptions import CaptureRepairError
    from producers.capture.worker.repair import skip_item, skip_job

    handle = _repair_target(target)
    with resolver_conn() as conn:
        try:
            if isinstance(handle, int):
                status = skip_item(conn, handle, actor(), reason)
                echo(f"item #{handle}: skipped; its job is {status}")
            else:
                skip_job(conn, handle, actor(), reason)
                echo(f"job {handle}: skipped")
        except CaptureRepairError as exc:
            fail(exc)
