"""The demo's summary: its figures read from the stores, the capture path's and the
workload's, printed as aligned lines or one JSON object, the verdict last."""

from __future__ import annotations

import json
from typing import Any

import click
import psycopg

from db.settings import DatabaseSettings
from infra.demo import captures as demo_captures
from infra.demo.projection_check import Comparison
from infra.demo.workload import WorkloadStats


def summarize(
    settings: DatabaseSettings,
    run_id: str,
    stats: WorkloadStats,
    elapsed: float,
    caught_up: bool,
    comparison: Comparison,
) -> dict[str, Any]:
    like = (f"{run_id}-%",)
    with psycopg.connect(settings.resolver_dsn) as conn:
        committed = (
            conn.execute("SELECT count(*) FROM outbox WHERE tenant_id LIKE %s", like).fetchone()
            or (0,)
        )[0]
        # Positions start at 1 and are gapless, so a stream's published position is
        # the number of its events in Kafka.
        published = (
            conn.execute(
                "SELECT coalesce(sum(published_position), 0)::bigint FROM stream_publication"
                " WHERE tenant_id LIKE %s",
                like,
            ).fetchone()
            or (0,)
        )[0]
        row = conn.execute("SELECT count(*) FROM catalog_item WHERE tenant_id LIKE %s", like)
        items = (row.fetchone() or (0,))[0]
    with psycopg.connect(settings.product_dsn) as conn:
        counts = conn.execute(
            "SELECT coalesce(sum(applied_count), 0), coalesce(sum(duplicate_count), 0),"
            " coalesce(sum(parked_count), 0), coalesce(sum(released_count), 0),"
            " coalesce(sum(ignored_count), 0), coalesce(sum(loaded_count), 0)"
            " FROM stream_progress WHERE tenant_id LIKE %s",
            like,
        ).fetchone() or (0, 0, 0, 0, 0, 0)
        quarantined = conn.execute(
            "SELECT count(*) FROM quarantine WHERE tenant_id LIKE %s OR tenant_id IS NULL",
            like,
        ).fetchone()
    return {
        "run_id": run_id,
        "events_committed": committed,
        "events_published": published,
        "events_applied": int(counts[0]),
        "duplicates_absorbed": int(counts[1]),
        "parked": int(counts[2]),
        "released": int(counts[3]),
        "ignored_stale": int(counts[4]),
        "loaded_by_rebuild": int(counts[5]),
        "quarantined": int(quarantined[0]) if quarantined else 0,
        "transactions_committed": stats.transactions,
        "transactions_rolled_back": stats.rolled_back + stats.rejected,
        "rolled_back_on_purpose": stats.rolled_back,
        "rejected": stats.rejected,
        "rejected_by_code": dict(sorted(stats.rejected_by_code.items())),
        "decisions_by_operation": dict(sorted(stats.decisions.items())),
        "review_cases_opened": stats.cases_opened,
        "items": items,
        "rows_compared": comparison.rows,
        "caught_up": caught_up,
        "mismatched_rows": len(comparison.differences),
        "elapsed_s": round(elapsed, 2),
        "events_per_s": round(committed / elapsed, 1) if elapsed else 0.0,
    }


def capture_summary(
    settings: DatabaseSettings, run_id: str, captures: demo_captures.CaptureStats, settled: bool
) -> dict[str, Any]:
    return {
        "captures_posted": captures.posted,
        "capture_reposts_answered_with_the_same_receipt": captures.repeated_posts,
        "captures_settled": settled,
        "capture_jobs": demo_captures.job_counts(settings, run_id),
        "capture_products": demo_captures.product_outcomes(settings, run_id),
        "capture_events": demo_captures.capture_path_events(settings, run_id),
    }


def print_summary(summary: dict[str, Any], mismatches: list[str], ok: bool, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({**summary, "ok": ok}))
    else:
        width = max(len(k) for k in summary)
        for key, value in summary.items():
            if key in ("rebuild", "restore_drill") and isinstance(value, dict):
                for part, figure in value.items():  # one line per figure
                    label = part.removeprefix("drill_").replace("_", " ")
                    name = f"{key.replace('_', ' ')} {label}"
                    click.echo(f"{name:<{width}}  {figure}")
                continue
            click.echo(f"{key.replace('_', ' '):<{width}}  {value}")
        for line in mismatches[:20]:
            click.echo(f"mismatch: {line}")
    verdict = "demo: OK" if ok else "demo: FAILED"
    detail = (
        f"{summary['events_committed']} events, projection matches accepted state,"
        f" {summary['rebuild']['stream']} rebuilt and cut over"
        + (
            f", restore drill recovered in {summary['restore_drill']['drill_recovery_s']} s"
            if "restore_drill" in summary
            else ""
        )
        if ok
        else f"failed: {', '.join(summary['failed_checks'])}; mismatched_rows="
        f"{summary['mismatched_rows']} quarantined={summary['quarantined']}"
    )
    click.echo(f"{verdict} ({detail})")
